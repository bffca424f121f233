#!/bin/sh
# codeint-image.sh: build the directory image "code-interpreter-v1" (E2B's code
# interpreter template) once; setup.sh runs it after the judge image.
#
# The image is the judge image (python3 with numpy, pandas, matplotlib, ...) as
# its base layer, read in place, plus one small layer: Debian's Jupyter kernel
# for Python (python3-ipykernel; jupyter_client is in the judge image already),
# sudo, curl, E2B's account "user" (uid 1000, /home/user, passwordless sudo),
# and the Java kernel (internal/codeint/JavaKernel.java) compiled with the
# judge image's JDK into /opt/dsec/codeint/java-SHA, where the service looks
# for it before compiling it itself.
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
PKGS="python3-ipykernel sudo curl"
JAVA_SRC="$(dirname "$0")/../internal/codeint/JavaKernel.java"

# shellcheck source=scripts/progress.sh
. "$(dirname "$0")/progress.sh"
# shellcheck source=scripts/overlay-image.sh
. "$(dirname "$0")/overlay-image.sh"

log() { printf 'codeint-image: %s\n' "$*" >&2; }
die() { printf 'codeint-image: ERROR: %s\n' "$*" >&2; exit 1; }

[ -f "$BASE/image.json" ] && [ -d "$BASE/rootfs" ] || die "the judge image ($BASE) is missing; setup.sh builds it first"
[ -f "$JAVA_SRC" ] || die "no $JAVA_SRC"
java_dir=java-$(sha256sum "$JAVA_SRC" | cut -c1-16)
stamp="$(cat "$BASE/image.json") $PKGS tmpdir $java_dir"
if overlay_cached "$OUT" "$stamp"; then
	log "cached ($OUT)"
	exit 0
fi
t0=$(date +%s)
overlay_open codeint "$BASE/rootfs"
overlay_apt "codeint image" $PKGS
if ! chroot "$r" getent passwd user >/dev/null; then
	chroot "$r" groupadd -g 1000 user
	chroot "$r" useradd -m -u 1000 -g 1000 -d /home/user -s /bin/bash user
fi
printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$r/etc/sudoers.d/user"
chmod 0440 "$r/etc/sudoers.d/user"
chroot "$r" python3 -c 'import ipykernel, jupyter_client, IPython, matplotlib_inline' ||
	die "the kernel's Python packages do not import"
chroot "$r" test -e /usr/share/jupyter/kernels/python3/kernel.json || die "no python3 kernel spec"
mkdir -p "$r/opt/dsec/codeint/.src"
cp "$JAVA_SRC" "$r/opt/dsec/codeint/.src/JavaKernel.java"
chroot "$r" javac -d "/opt/dsec/codeint/$java_dir" /opt/dsec/codeint/.src/JavaKernel.java ||
	die "the Java kernel does not compile"
rm -rf "$r/opt/dsec/codeint/.src"
overlay_close
# The judge image's /tmp is a symlink into FnCall's per-run /w; here /tmp is
# a directory of its own, as E2B's templates have it.
rm -rf "$work/upper/w" "$work/upper/tmp"
mkdir -m 1777 "$work/upper/tmp"
overlay_publish "$OUT" "$stamp" "{\"version\":2,\"name\":\"$NAME\",\"description\":\"E2B's code interpreter template: the judge image plus python3-ipykernel, sudo, curl, user (uid 1000) and the compiled Java kernel\",\"layers\":[{\"role\":\"base\",\"dir\":\"../judge/rootfs\"},{\"role\":\"toolkit\",\"dir\":\"layer\"}],\"created\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}"
log "built in $(($(date +%s) - t0))s: $(du -sh "$OUT/layer" | cut -f1) over the judge image"
