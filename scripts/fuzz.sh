#!/bin/sh
# fuzz.sh: run every Fuzz* target in the module for $FUZZTIME (default 15s; a
# count such as 300x runs that many executions and has no deadline to race).
set -eu
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-15s}
cd "$(dirname "$0")/.."

targets=$(grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . |
	sed 's|^\(.*\)/[^/]*_test\.go:func \(Fuzz.*\)$|\1 \2|' | sort -u)
if [ -z "$targets" ]; then
	echo "fuzz: no Fuzz targets found"
	exit 0
fi

# The parsers of hostile input that must keep a fuzzer (issue 30): a target
# missing here (renamed, deleted) fails the run instead of silently not running.
required='./internal/backend/container FuzzTreeCopy
./internal/fsops FuzzExtractTar
./internal/fsops FuzzExtractTarEntries
./internal/fsops FuzzTarRoundTrip
./cmd/dsec FuzzCpExtract
./cmd/dsec FuzzCpRoundTrip
./internal/frontend/e2b FuzzControlBodies
./internal/frontend/dashboard FuzzTerminalMessages
./internal/backend/fncall FuzzParseEvent
./internal/backend/fncall FuzzZygoteEvents
./internal/backend/vm/qmp FuzzExecuteReply
./internal/image/lazy FuzzJournalRoundTrip
./internal/image/lazy FuzzReplayJournal'
missing=$(printf '%s\n' "$required" | while read -r want; do
	printf '%s\n' "$targets" | grep -qxF "$want" || echo "$want"
done)
if [ -n "$missing" ]; then
	echo "fuzz: required targets not found:"
	echo "$missing"
	exit 1
fi
echo "$targets" | while read -r dir name; do
	echo "fuzz: $dir $name ($FUZZTIME)"
	# Fuzzing needs exactly one target per invocation.
	"$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "$dir"
done
