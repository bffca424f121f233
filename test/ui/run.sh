#!/bin/sh
# Dashboard end-to-end suite: headless Debian chromium driven by playwright-core
# against a real `dsec server` (bin/dsec running bin/dsecd, as root, busybox sandboxes) and, for the
# first-paint figure, test/ui/mocknode (the agent with the mock driver holding
# 10,000 sandboxes). Screenshots go to bin/ui-artifacts/.
#   sh test/ui/run.sh            (from the repository root, after make build)
set -eu
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
DSEC=${DSEC:-$ROOT/bin/dsec}
GO=${GO:-go}
[ -x /usr/bin/chromium ] || { echo "test/ui: /usr/bin/chromium is missing (make setup installs it)" >&2; exit 1; }
[ -d node_modules/playwright-core ] || npm ci --no-audit --no-fund
(cd "$ROOT" && "$GO" build -o bin/dsec-ui-mocknode ./test/ui/mocknode)
DATA=$(mktemp -d /tmp/dsec-ui.XXXXXX)
. "$ROOT/test/lib/ports.sh"
PORT=${PORT:-$(free_ports)}
# A loopback port the tests may run a registry on (plain HTTP is allowed to it).
REGPORT=${REGPORT:-$(free_ports)}
TOKEN=ui-e2e-$$-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
"$DSEC" server --data-dir "$DATA/server" --listen "127.0.0.1:$PORT" --token "$TOKEN" --cleanup-on-exit \
  --insecure-registry "127.0.0.1:$REGPORT" >"$DATA/server.log" 2>&1 &
PID=$!
MOCK_N=${MOCK_N:-10000}
"$ROOT/bin/dsec-ui-mocknode" -n "$MOCK_N" -token "$TOKEN" -dir "$DATA/mock" >"$DATA/mock.out" 2>"$DATA/mock.log" &
MPID=$!
cleanup() {
  kill "$PID" "$MPID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  wait "$MPID" 2>/dev/null || true
  rm -rf "$DATA"
}
trap cleanup EXIT INT TERM
for _ in $(seq 150); do
  curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null 2>&1 && break
  sleep 0.1
done
# mocknode fills itself while the other tests run; the first-paint test waits
# for its "ready URL" line in DSEC_MOCK_OUT.
export DSEC_URL="http://127.0.0.1:$PORT" DSEC_TOKEN="$TOKEN" DSEC_MOCK_N="$MOCK_N" DSEC_MOCK_OUT="$DATA/mock.out"
export DSEC_UI_REGISTRY_PORT="$REGPORT" GO
export DSEC_UI_ARTIFACTS="$ROOT/bin/ui-artifacts"
mkdir -p "$DSEC_UI_ARTIFACTS"
status=0
[ $# -gt 0 ] || set -- ./*.test.mjs
# UI_TEST_ARGS: more node --test flags, e.g. --test-name-pattern=terminal
node --test --test-concurrency=1 --test-timeout=300000 ${UI_TEST_ARGS:-} "$@" || status=$?
if [ $status -ne 0 ]; then tail -20 "$DATA/server.log"; tail -5 "$DATA/mock.log"; fi
exit $status
