#!/bin/sh
# Builds the static dsec-init binary that initbin embeds. Works from any
# directory; the top-level Makefile runs `sh internal/backend/initbin/build.sh`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec sh "$here/../../../csrc/build.sh" "$here/../../../csrc/init/dsec-init.c" "$here/dsec-init"
