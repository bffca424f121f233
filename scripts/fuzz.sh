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
echo "$targets" | while read -r dir name; do
	echo "fuzz: $dir $name ($FUZZTIME)"
	# Fuzzing needs exactly one target per invocation.
	"$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "$dir"
done
