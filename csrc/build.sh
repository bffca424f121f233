#!/bin/sh
# build.sh SRC OUT: the one build rule of dsec's C programs (the container
# init, the microVM agent, the FnCall zygote; internal/backend/initbin/build.sh,
# internal/backend/vm/agentbin/build.sh and internal/backend/fncall/build.sh call it). Each
# program is one translation unit (its shared parts are the header-only
# csrc/common/*.h), built static with musl-gcc when there is one, with the
# same flags for all three and every warning an error.
set -eu
[ $# -eq 2 ] || { echo "usage: build.sh SRC OUT" >&2; exit 2; }
src=$1 out=$2
CC=${CC:-}
if [ -z "$CC" ]; then
	if command -v musl-gcc >/dev/null 2>&1; then CC=musl-gcc; else CC=gcc; fi
fi
CFLAGS="-std=gnu11 -static -O2 -Wall -Wextra -Werror"
# shellcheck disable=SC2086 # CFLAGS is a word list
$CC $CFLAGS -o "$out.tmp" "$src"
strip "$out.tmp" 2>/dev/null || true
mv "$out.tmp" "$out"
