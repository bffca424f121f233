#!/bin/sh
# Builds the static dsec-init binary that initbin embeds. Works from any
# directory; the top-level Makefile runs `sh internal/initbin/build.sh`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src="$here/../../csrc/init/dsec-init.c"
out="$here/dsec-init"
CC=${CC:-}
if [ -z "$CC" ]; then
	if command -v musl-gcc >/dev/null 2>&1; then CC=musl-gcc; else CC=gcc; fi
fi
$CC -static -Os -Wall -Wextra -Werror -o "$out.tmp" "$src"
strip "$out.tmp" 2>/dev/null || true
mv "$out.tmp" "$out"
