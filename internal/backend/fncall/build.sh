#!/bin/sh
# Builds the static dsec-fncall zygote that package fncall embeds (source in
# csrc/fncall). The top-level Makefile runs it; so does `go generate`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec sh "$here/../../../csrc/build.sh" "$here/../../../csrc/fncall/dsec-fncall.c" "$here/dsec-fncall"
