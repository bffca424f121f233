#!/bin/sh
# bench-create-ab.sh OLD_DSEC NEW_DSEC [ROUNDS] [N]
#
# Create cost of two dsec binaries side by side: ROUNDS interleaved runs of
# `dsec bench create --n N --parallel 1` each (old, new, old, new, ...), then
# the median p50 of each, their ratio, and the CPU time per create (user+sys of
# the bench process and its reaped children: the agent and the inits), which
# a loaded machine disturbs less than wall time. Build the old binary from a
# commit with e.g.
#   git archive BASE | tar -x -C /tmp/old && (cd /tmp/old && make build)
set -eu
old=$1 new=$2 rounds=${3:-3} n=${4:-300}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=0
while [ "$i" -lt "$rounds" ]; do
	for which in old new; do
		if [ "$which" = old ]; then bin=$old; else bin=$new; fi
		/usr/bin/time -f "cpu %U %S" "$bin" bench create --n "$n" --parallel 1 --json >"$out.run" 2>"$out.time"
		echo "$which $(grep -o '"p50_ms":[0-9.]*' "$out.run" | cut -d: -f2) $(grep cpu "$out.time" | awk '{print $2 + $3}')" >>"$out"
	done
	i=$((i + 1))
done
rm -f "$out.run" "$out.time"
awk -v n="$n" '
	{ p[$1] = p[$1] " " $2; c[$1] += $3; k[$1]++ }
	function median(s,   a, m, i, j, t) {
		m = split(s, a, " ")
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	END {
		po = median(p["old"]); pn = median(p["new"])
		co = c["old"] / k["old"] / n * 1000; cn = c["new"] / k["new"] / n * 1000
		printf "p50 of %d runs each: old %.2f ms, new %.2f ms, new/old %.2f\n", k["old"], po, pn, pn / po
		printf "CPU per create (incl. teardown): old %.2f ms, new %.2f ms, new/old %.2f\n", co, cn, cn / co
	}' "$out"
