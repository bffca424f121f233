#!/bin/sh
# Builds the static dsec-fncall zygote that package fncall embeds (source in
# csrc/fncall). The top-level Makefile runs it; so does `go generate`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src="$here/../../csrc/fncall/dsec-fncall.c"
out="$here/dsec-fncall"
CC=${CC:-}
if [ -z "$CC" ]; then
	if command -v musl-gcc >/dev/null 2>&1; then CC=musl-gcc; else CC=gcc; fi
fi
$CC -static -O2 -Wall -Wextra -Werror -o "$out.tmp" "$src"
strip "$out.tmp" 2>/dev/null || true
mv "$out.tmp" "$out"
