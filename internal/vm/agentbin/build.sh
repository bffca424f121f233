#!/bin/sh
# Builds the static microVM guest agent (csrc/vmagent) that agentbin embeds.
# Works from any directory; `make init` runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src="$here/../../../csrc/vmagent/dsec-vmagent.c"
out="$here/dsec-vmagent"
CC=${CC:-}
if [ -z "$CC" ]; then
	if command -v musl-gcc >/dev/null 2>&1; then CC=musl-gcc; else CC=gcc; fi
fi
$CC -static -Os -Wall -Wextra -Werror -o "$out.tmp" "$src"
strip "$out.tmp" 2>/dev/null || true
mv "$out.tmp" "$out"
