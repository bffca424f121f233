#!/bin/sh
# jest-overhead.sh URL [N]: the per-call time of a one-test jest suite through
# SandboxFusion's /run_code at URL (N calls one at a time with curl after one
# to warm up, the median) and bare: the same jest started N times in the image
# sandboxfusion-jest's tree (chroot into an overlay of it, no namespaces,
# cgroup or limits; the median). Run as root, with a server started as
#     bin/dsec server --sandboxfusion-listen 127.0.0.1:8080 &
set -eu
URL=$1
N=${2:-21}
ROOT=${DSEC_IMAGES_DIR:-/var/lib/dsec/images}/sandboxfusion-jest/rootfs
CODE='test("hello", () => {
  expect("hello, " + "world").toBe("hello, world");
});
'
body=$(CODE=$CODE python3 -c 'import json, os; print(json.dumps({"language": "jest", "code": os.environ["CODE"], "run_timeout": 20}))')
out=$(mktemp)
for i in $(seq 0 "$N"); do
	t=$(curl -sS -o "$out" -w '%{time_total}' -H 'Content-Type: application/json' -d "$body" "$URL/run_code")
	grep -q '"status":"Success"' "$out" || { echo "call $i: $(cat "$out")" >&2; exit 1; }
	[ "$i" -eq 0 ] || echo "$t" >>"$out.times"
done
through=$(sort -n "$out.times" | awk '{ a[NR] = $1 } END { printf "%.0f\n", a[int((NR + 1) / 2)] * 1000 }')
rm -f "$out" "$out.times"
bare=$(CODE=$CODE N=$N ROOT=$ROOT unshare -m --propagation private sh -eu -c '
T=$(mktemp -d /var/lib/jest-overhead.XXXXXX)
mkdir "$T/u" "$T/w" "$T/m"
mount -t overlay overlay -o "lowerdir=$ROOT,upperdir=$T/u,workdir=$T/w" "$T/m"
mount -t proc proc "$T/m/proc"
for i in $(seq 0 "$N"); do
	rm -rf "$T/m/w/run"
	mkdir -p "$T/m/w/run/tmp"
	printf "%s" "$CODE" >"$T/m/w/run/main.test.ts"
	s=$(date +%s%N)
	chroot "$T/m" env -i PATH=/usr/bin:/bin HOME=/w/run TMPDIR=/w/run/tmp FORCE_COLOR=0 sh -c \
		"cd /w/run && ln -s /opt/sandboxfusion/node/node_modules /opt/sandboxfusion/node/package.json /opt/sandboxfusion/node/babel.config.js . && exec node node_modules/jest/bin/jest.js" >/dev/null 2>&1 || echo "bare run $i failed" >&2
	e=$(date +%s%N)
	[ "$i" -eq 0 ] || echo $(((e - s) / 1000000)) >>"$T/times"
done
sort -n "$T/times" | awk "{ a[NR] = \$1 } END { print a[int((NR + 1) / 2)] }"
umount "$T/m/proc" "$T/m"
rm -rf "$T"')
echo "run_code p50 ms: $through"
echo "bare p50 ms: $bare"
