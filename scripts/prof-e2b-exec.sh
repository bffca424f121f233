#!/bin/sh
# prof-e2b-exec.sh DSEC OUT [C] [SECS]
#
# CPU profile of `dsec server` (binary DSEC) under C loops of
# commands.run('true') through the unmodified e2b SDK (test/e2b/loops.mjs):
# perf samples the server's process while the loops run and OUT.txt gets the
# flat top and the cumulative top of the server's own functions. Run as root,
# after make build, under the machine's heavy lock.
set -eu
dsec=$1 out=$2 c=${3:-100} secs=${4:-8}
here=$(cd "$(dirname "$0")/../test/e2b" && pwd)
[ -d "$here/node_modules/e2b" ] || (cd "$here" && npm ci --no-audit --no-fund)
data=$(mktemp -d /tmp/dsec-e2bprof.XXXXXX)
. "$here/../lib/ports.sh"
port=$(free_ports)
token=prof-$$
"$dsec" server --data-dir "$data" --listen "127.0.0.1:$port" --token "$token" --cleanup-on-exit >"$data/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$data"' EXIT INT TERM
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$port/v1/health" >/dev/null 2>&1 && break
	sleep 0.1
done
export E2B_API_URL="http://127.0.0.1:$port" E2B_SANDBOX_URL="http://127.0.0.1:$port" E2B_API_KEY="e2b_$token"
node "$here/loops.mjs" "$c" "$secs" >"$out.rate" 2>"$out.err" &
np=$!
while ! grep -q READY "$out.err" 2>/dev/null; do
	kill -0 $np 2>/dev/null || { cat "$out.err" >&2; exit 1; }
	sleep 0.2
done
c0=$(cut -d' ' -f14,15 "/proc/$pid/stat" | tr ' ' +)
perf record -F 499 -g -p "$pid" -o "$out.perf" -- sleep "$secs" >/dev/null 2>&1
c1=$(cut -d' ' -f14,15 "/proc/$pid/stat" | tr ' ' +)
wait $np
{
	cat "$out.rate"
	echo "server CPU during the samples: $(( $c1 - ($c0) )) ticks of 10 ms in $secs s"
	echo "== flat"
	perf report -i "$out.perf" --no-children --sort symbol --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -12
	echo "== cumulative (dsec functions)"
	perf report -i "$out.perf" --children --sort symbol --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' |
		grep -E 'dsec-dev/dsec/internal/(agent|frontend|backend)|syscall.openat' | head -15
} | cut -c1-150 >"$out.txt"
cat "$out.txt"
