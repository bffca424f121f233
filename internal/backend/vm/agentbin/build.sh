#!/bin/sh
# Builds the static microVM guest agent (csrc/vmagent) that agentbin embeds.
# Works from any directory; `make init` runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec sh "$here/../../../../csrc/build.sh" "$here/../../../../csrc/vmagent/dsec-vmagent.c" "$here/dsec-vmagent"
