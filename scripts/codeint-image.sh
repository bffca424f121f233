#!/bin/sh
# codeint-image.sh: build the directory image "code-interpreter-v1" (E2B's code
# interpreter template) once; setup.sh runs it after the judge image.
#
# The image is the judge image (python3 with numpy, pandas, matplotlib, ...) as
# its base layer, read in place, plus one small layer: Debian's Jupyter kernel
# for Python (python3-ipykernel; jupyter_client is in the judge image already),
# sudo, and E2B's account "user" (uid 1000, /home/user, passwordless sudo).
# The layer is the upper directory of an overlay mount of the judge tree in
# which apt-get ran, so no file of the judge image is copied. The interpreter
# service itself is not in the image: the E2B front end writes the one its
# binary embeds into each sandbox it creates from this template
# (internal/frontend/e2b/codeint.go).
#
# Idempotent: returns at once when the image exists and was built on the judge
# image that is there now.
set -eu
DSEC_IMAGES_DIR=${DSEC_IMAGES_DIR:-/var/lib/dsec/images}
NAME=code-interpreter-v1
OUT="$DSEC_IMAGES_DIR/$NAME"
BASE="$DSEC_IMAGES_DIR/judge"
PKGS="python3-ipykernel sudo"

# shellcheck source=scripts/progress.sh
. "$(dirname "$0")/progress.sh"

log() { printf 'codeint-image: %s\n' "$*" >&2; }
die() { printf 'codeint-image: ERROR: %s\n' "$*" >&2; exit 1; }

[ -f "$BASE/image.json" ] && [ -d "$BASE/rootfs" ] || die "the judge image ($BASE) is missing; setup.sh builds it first"
stamp="$(cat "$BASE/image.json") $PKGS tmpdir"
if [ -f "$OUT/image.json" ] && [ -d "$OUT/layer" ] && [ "$(cat "$OUT/base-stamp" 2>/dev/null)" = "$stamp" ]; then
	log "cached ($OUT)"
	exit 0
fi
t0=$(date +%s)
work="$DSEC_IMAGES_DIR/.codeint-build.$$"
rm -rf "$work"
mkdir -p "$work/upper" "$work/work" "$work/root"
cleanup() {
	umount "$work/root/proc" 2>/dev/null || true
	umount "$work/root" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
mount -t overlay overlay -o "lowerdir=$BASE/rootfs,upperdir=$work/upper,workdir=$work/work" "$work/root" ||
	die "cannot mount an overlay of $BASE/rootfs"
mount -t proc proc "$work/root/proc" || die "cannot mount /proc in $work/root"
log "apt-get install $PKGS (log $work.apt.log)"
if ! with_progress "codeint image: apt-get" "$work.apt.log" chroot "$work/root" sh -c \
	"apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PKGS"; then
	tail -n 20 "$work.apt.log" >&2 || true
	die "installing $PKGS failed; see $work.apt.log"
fi
rm -f "$work.apt.log"
r="$work/root"
if ! chroot "$r" getent passwd user >/dev/null; then
	chroot "$r" groupadd -g 1000 user
	chroot "$r" useradd -m -u 1000 -g 1000 -d /home/user -s /bin/bash user
fi
printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$r/etc/sudoers.d/user"
chmod 0440 "$r/etc/sudoers.d/user"
chroot "$r" python3 -c 'import ipykernel, jupyter_client, IPython, matplotlib_inline' ||
	die "the kernel's Python packages do not import"
chroot "$r" test -e /usr/share/jupyter/kernels/python3/kernel.json || die "no python3 kernel spec"
chroot "$r" apt-get clean >/dev/null 2>&1 || true
rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin
umount "$r/proc"
umount "$r"
rm -rf "$OUT.old"
[ -d "$OUT" ] && mv "$OUT" "$OUT.old"
mkdir -p "$OUT"
# The judge image's /tmp is a symlink into FnCall's per-run /w; here /tmp is
# a directory of its own, as E2B's templates have it.
rm -rf "$work/upper/w" "$work/upper/tmp"
mkdir -m 1777 "$work/upper/tmp"
mv "$work/upper" "$OUT/layer"
printf '%s' "$stamp" >"$OUT/base-stamp"
cat >"$OUT/image.json.tmp" <<EOF
{"version":2,"name":"$NAME","description":"E2B's code interpreter template: the judge image plus python3-ipykernel, sudo and user (uid 1000)","layers":[{"role":"base","dir":"../judge/rootfs"},{"role":"toolkit","dir":"layer"}],"created":"$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
EOF
mv -f "$OUT/image.json.tmp" "$OUT/image.json"
rm -rf "$OUT.old"
log "built in $(($(date +%s) - t0))s: $(du -sh "$OUT/layer" | cut -f1) over the judge image"
