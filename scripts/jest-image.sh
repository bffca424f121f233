#!/bin/sh
# jest-image.sh: build the directory image "sandboxfusion-jest" once; setup.sh
# runs it after the judge image. SandboxFusion's jest language runs in it
# (internal/frontend/sandboxfusion/runcode.go).
#
# SandboxFusion runs jest in its own npm project: jest 29, Babel's env and
# TypeScript presets, jsdom, testing-library. Debian packages jest (29.3) and
# Babel but not testing-library, so the project comes from npm's registry,
# every package pinned by scripts/sandboxfusion-jest/package-lock.json
# (puppeteer, which downloads a browser, is left out). npm is the host's, or
# else Debian's installed in an overlay of the judge tree for the build; it
# is not in the image.
#
# FnCall runs single-directory images, so the image is the judge tree
# hard-linked (no file is copied: the two images share their files on disk and
# in the page cache) plus the project in /opt/sandboxfusion/node (75 MB;
# 158 MB on disk with the tree's own directories). The build takes ~25 s with
# the host's npm, ~3 min with Debian's (its install).
# Only jest calls use it; the judge image is unchanged.
#
# JEST_IMAGE_NPM=debian uses Debian's npm even where the host has one.
#
# Idempotent: returns at once when the image exists and was built from the
# judge image and project files that are there now.
set -eu
DSEC_IMAGES_DIR=${DSEC_IMAGES_DIR:-/var/lib/dsec/images}
NAME=sandboxfusion-jest
OUT="$DSEC_IMAGES_DIR/$NAME"
BASE="$DSEC_IMAGES_DIR/judge"
PROJECT="$(dirname "$0")/sandboxfusion-jest"
DEST=/opt/sandboxfusion/node

# shellcheck source=scripts/progress.sh
. "$(dirname "$0")/progress.sh"
# shellcheck source=scripts/overlay-image.sh
. "$(dirname "$0")/overlay-image.sh"

log() { printf 'jest-image: %s\n' "$*" >&2; }
die() { printf 'jest-image: ERROR: %s\n' "$*" >&2; exit 1; }

[ -f "$BASE/image.json" ] && [ -d "$BASE/rootfs" ] || die "the judge image ($BASE) is missing; setup.sh builds it first"
go_installed=no
[ -f "$BASE/go-installed" ] && go_installed=yes
stamp="$(cat "$BASE/image.json") go-installed=$go_installed $(cat "$PROJECT/package.json" "$PROJECT/package-lock.json" "$PROJECT/babel.config.js" | sha256sum | cut -d' ' -f1)"
if [ -f "$OUT/image.json" ] && [ -d "$OUT/rootfs" ] && [ "$(cat "$OUT/base-stamp" 2>/dev/null)" = "$stamp" ]; then
	log "cached ($OUT)"
	exit 0
fi
t0=$(date +%s)
work="$DSEC_IMAGES_DIR/.jest-build.$$"
stage="$work/stage"
# npm_ci DIR [CHROOT]: npm ci in DIR (inside CHROOT when given), its output
# in a log shown on failure.
npm_ci() {
	log "npm ci in $1 (log $work.npm.log)"
	if [ $# -eq 1 ]; then
		set -- sh -c "cd '$1' && npm ci --ignore-scripts --no-audit --no-fund --omit=dev"
	else
		set -- chroot "$2" env HOME=/root NODE_EXTRA_CA_CERTS=/root/ca-certificates.crt \
			sh -c "cd '$1' && npm ci --ignore-scripts --no-audit --no-fund --omit=dev"
	fi
	if ! with_progress "jest image: npm ci" "$work.npm.log" "$@"; then
		tail -n 20 "$work.npm.log" >&2 || true
		die "npm ci failed; see $work.npm.log"
	fi
	rm -f "$work.npm.log"
}
if [ "${JEST_IMAGE_NPM:-}" != debian ] && command -v npm >/dev/null 2>&1; then
	# The host's npm (and its registry and CA settings): the packages are
	# plain JavaScript (no install scripts run), whichever node installs them.
	rm -rf "$work"
	trap 'rm -rf "$work"' EXIT INT TERM
	mkdir -p "$stage$DEST"
	cp "$PROJECT/package.json" "$PROJECT/package-lock.json" "$PROJECT/babel.config.js" "$stage$DEST/"
	npm_ci "$stage$DEST"
else
	# Debian's npm in an overlay of the judge tree, trusting the host's CAs
	# (a registry behind a TLS proxy); only the project is kept.
	overlay_open jest "$BASE/rootfs"
	stage="$work/upper"
	overlay_apt "jest image" npm
	mkdir -p "$r$DEST"
	cp "$PROJECT/package.json" "$PROJECT/package-lock.json" "$PROJECT/babel.config.js" "$r$DEST/"
	[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$r/root/"
	npm_ci "$DEST" "$r"
	overlay_close
fi
[ -f "$stage$DEST/node_modules/jest/bin/jest.js" ] || die "npm ci left no $DEST/node_modules/jest"

tree="$work/rootfs"
cp -al "$BASE/rootfs" "$tree" || die "cannot hard-link the judge tree into $tree"
mkdir -p "$tree$(dirname "$DEST")"
cp -a "$stage$DEST" "$tree$DEST"
chroot "$tree" sh -c "cd $DEST && node node_modules/jest/bin/jest.js --version" >/dev/null ||
	die "jest does not run in the image's $DEST"
rm -rf "$OUT.old"
if [ -d "$OUT" ]; then
	mv "$OUT" "$OUT.old"
fi
mkdir -p "$OUT"
mv "$tree" "$OUT/rootfs"
printf '%s' "$stamp" >"$OUT/base-stamp"
printf '%s\n' "{\"version\":2,\"name\":\"$NAME\",\"description\":\"SandboxFusion's jest runtime: the judge image (hard-linked) plus the npm project in $DEST (scripts/sandboxfusion-jest)\",\"layers\":[{\"role\":\"base\",\"dir\":\"rootfs\"}],\"created\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}" >"$OUT/image.json.tmp"
mv -f "$OUT/image.json.tmp" "$OUT/image.json"
rm -rf "$OUT.old"
log "built in $(($(date +%s) - t0))s: $(du -sh "$OUT/rootfs$DEST" | cut -f1) of npm packages over the judge image"
