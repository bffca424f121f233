#!/bin/sh
# E2B acceptance suite: starts bin/dsec server (root; it runs bin/dsecd) on a random port with its
# own data dir, points the unmodified e2b SDK at it and runs `node --test`.
#   sh test/e2b/run.sh [test files...]     (from the repository root, after make build)
#   sh test/e2b/run.sh bench [--n 200 --rounds 5 --creates 100]
# DSEC_E2E_RACE=1 (without DSEC) builds and runs a -race server (dsec-race and
# the dsecd-race beside it). The server runs
# with GORACE=halt_on_error=1 (other GORACE options kept); the suite fails when
# its log holds a race report or it exits non-zero when stopped with SIGTERM.
set -eu
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
DSEC=${DSEC:-$ROOT/bin/dsec}
# Install the pinned packages when missing or when package-lock.json changed
# since the last install (a package added to the suite).
if [ ! -d node_modules/e2b ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
DATA=$(mktemp -d /tmp/dsec-e2b.XXXXXX)
if [ "${DSEC_E2E_RACE:-}" = 1 ] && [ "$DSEC" = "$ROOT/bin/dsec" ]; then
  DSEC=$DATA/dsec-race
  (cd "$ROOT" && go build -race -o "$DSEC" ./cmd/dsec && go build -race -o "$DATA/dsecd-race" ./cmd/dsecd) ||
    { rm -rf "$DATA"; exit 1; }
fi
GORACE="$(printf '%s\n' ${GORACE:-} | grep -v '^halt_on_error=' | tr '\n' ' ')halt_on_error=1"
export GORACE
. "$ROOT/test/lib/ports.sh"
PORT=${PORT:-$(free_ports)}
# Two loopback ports the tests may run registries on (plain HTTP is allowed to
# them): DSEC_E2B_REGISTRY_PORT and the one after it.
REGPORT=${REGPORT:-$(free_ports 2)}
TOKEN=e2b-acceptance-$$
"$DSEC" server --data-dir "$DATA" --listen "127.0.0.1:$PORT" --token "$TOKEN" --cleanup-on-exit \
  --insecure-registry "127.0.0.1:$REGPORT" --insecure-registry "127.0.0.1:$((REGPORT + 1))" >"$DATA/server.log" 2>&1 &
PID=$!
cleanup() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$DATA"; }
trap cleanup EXIT INT TERM
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null 2>&1 && break
  sleep 0.1
done
export E2B_API_URL="http://127.0.0.1:$PORT" E2B_SANDBOX_URL="http://127.0.0.1:$PORT" E2B_API_KEY="e2b_$TOKEN"
export DSEC_E2B_REGISTRY_PORT="$REGPORT" DSEC_E2B_SERVER_LOG="$DATA/server.log"
status=0
if [ "${1:-}" = bench ]; then
  shift
  node bench.mjs "$@" || status=$?
else
  if [ $# -eq 0 ]; then set -- ./*.test.mjs; fi
  node --test --test-concurrency=1 --test-timeout=120000 "$@" || status=$?
fi
# Stop the server here (cleanup only reaps it) and read how it ended.
server=0
kill -TERM "$PID" 2>/dev/null || true
wait "$PID" || server=$?
if grep -q 'WARNING: DATA RACE' "$DATA/server.log"; then
  echo "run.sh: the race detector reported a data race in dsec server:" >&2
  sed -n '/WARNING: DATA RACE/,$p' "$DATA/server.log" | head -200 >&2
  status=1
elif [ $server -ne 0 ]; then
  echo "run.sh: dsec server exited with status $server" >&2
  status=1
fi
[ $status -eq 0 ] || tail -20 "$DATA/server.log"
exit $status
