#!/bin/sh
# bench-e2b-ab.sh OLD_DSEC NEW_DSEC [throughput.mjs options]
#
# commands.run('true') through the unmodified e2b SDK against two dsec builds
# side by side in one run: starts `dsec server` of each (own data dir, own
# port) and runs test/e2b/throughput.mjs against both, interleaved: latency
# one at a time, throughput at each concurrency (default 1,10,50), time to a
# stream's first output and the server's CPU with idle streams. Build
# the old binary from a commit with e.g.
#   git archive main | tar -x -C /tmp/old && (cd /tmp/old && make build)
# Run as root under the machine's heavy lock, after make build.
set -eu
old=$1 new=$2
shift 2
here=$(cd "$(dirname "$0")/../test/e2b" && pwd)
[ -d "$here/node_modules/e2b" ] || (cd "$here" && npm ci --no-audit --no-fund)
. "$here/../lib/ports.sh"
pids= dirs= args=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	for d in $dirs; do rm -rf "$d"; done
}
trap cleanup EXIT INT TERM
for which in old new; do
	if [ "$which" = old ]; then bin=$old; else bin=$new; fi
	data=$(mktemp -d /tmp/dsec-e2b-ab.XXXXXX)
	port=$(free_ports)
	token=ab-$which-$$
	"$bin" server --data-dir "$data" --listen "127.0.0.1:$port" --token "$token" --cleanup-on-exit >"$data/server.log" 2>&1 &
	pid=$!
	pids="$pids $pid" dirs="$dirs $data"
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$port/v1/health" >/dev/null 2>&1 && break
		sleep 0.1
	done
	args="$args $which=http://127.0.0.1:$port=$token=$pid"
done
# shellcheck disable=SC2086 # one word per server
node "$here/throughput.mjs" "$@" $args
