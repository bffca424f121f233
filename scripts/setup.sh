#!/bin/sh
# setup.sh: install what dsec's build, tests and benchmarks need and build the
# default root file system images. Idempotent; run as root. A second run with
# everything in place does no network access and finishes in well under a second.
#
#   sh scripts/setup.sh                 everything (make setup, make test)
#   sh scripts/setup.sh demo            only what `dsec demo` uses (make demo):
#                                       the build's packages and the debian
#                                       image; no VM kernel, judge or desktop
#                                       image, no browser
#   sh scripts/setup.sh demo-packages   the demo's packages only (make demo
#                                       builds dsec while the image builds)
#
#   DSEC_IMAGES_DIR   where images live (default /var/lib/dsec/images)
#   DEBIAN_MIRROR     debootstrap mirror (default http://deb.debian.org/debian)
set -eu

DSEC_IMAGES_DIR=${DSEC_IMAGES_DIR:-/var/lib/dsec/images}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# A bookworm debootstrap the lead may have started (or finished) by hand:
#   debootstrap --variant=minbase --include=python3,git,ca-certificates,sudo,python-is-python3,curl \
#       bookworm /var/lib/dsec/images/.debian-build http://deb.debian.org/debian
# with its output, followed by "rc=N", in /tmp/debootstrap.log.
PRESEED_DIR=/var/lib/dsec/images/.debian-build
PRESEED_LOG=/tmp/debootstrap.log

MODE=${1:-all}
case "$MODE" in
all | demo | demo-packages) ;;
*)
	printf 'usage: %s [all|demo|demo-packages]\n' "$0" >&2
	exit 2
	;;
esac

# What `dsec demo` needs: debootstrap for the debian image, a C compiler for
# the static helpers (make init) and make. The demo's node runs container
# sandboxes only.
DEMO_PACKAGES="debootstrap musl-tools gcc make ca-certificates"
PACKAGES="debootstrap busybox-static crun runc musl-tools gcc clang libclang-rt-14-dev make iproute2 python3 python3-pytest python3-setuptools python3-pip erofs-utils ca-certificates git qemu-system-x86 qemu-utils e2fsprogs xz-utils"
# The dashboard's browser tests (test/ui): Debian's chromium, and a font for its screenshots.
PACKAGES="$PACKAGES chromium fonts-liberation"
# The Dockerfile conformance suite (internal/image/build) builds each Dockerfile with buildah too.
PACKAGES="$PACKAGES buildah"
[ "$MODE" = all ] || PACKAGES=$DEMO_PACKAGES

# shellcheck source=scripts/progress.sh
. "$(dirname "$0")/progress.sh"

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

[ "$(id -u)" = 0 ] || die "must run as root"

T0=$(now)
export DEBIAN_FRONTEND=noninteractive

# ---- packages ---------------------------------------------------------------
t=$(now)
missing=""
for p in $PACKAGES; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
	log "installing:$missing"
	apt-get update -q || die "apt-get update failed"
	# shellcheck disable=SC2086
	apt-get install -y -q --no-install-recommends $missing || die "apt-get install failed:$missing"
	log "packages installed in $(since "$t")"
else
	log "packages: all present ($(since "$t"))"
fi

[ "$MODE" = demo-packages ] && exit 0

# ---- images -----------------------------------------------------------------
mkdir -p "$DSEC_IMAGES_DIR"
# Serialise concurrent setups: the lock is held until this script exits.
exec 9>"$DSEC_IMAGES_DIR/.setup.lock"
if ! flock -n 9; then
	log "another setup holds $DSEC_IMAGES_DIR/.setup.lock; waiting"
	flock 9
fi

# write_manifest DIR NAME DESCRIPTION: the image manifest, version 2 (internal/image)
write_manifest() {
	cat >"$1/image.json.tmp" <<EOF
{"version":2,"name":"$2","description":"$3","layers":[{"role":"base","dir":"rootfs"}],"created":"$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
EOF
	mv -f "$1/image.json.tmp" "$1/image.json"
}

# install_rootfs TREE IMAGEDIR: atomically make TREE the image's rootfs.
install_rootfs() {
	mkdir -p "$2"
	if [ -e "$2/rootfs" ]; then
		# Left over from an interrupted run (no image.json): replace it.
		rm -rf "$2/rootfs.old"
		mv "$2/rootfs" "$2/rootfs.old"
	fi
	mv "$1" "$2/rootfs"
	rm -rf "$2/rootfs.old"
}

# common_dirs TREE: directories every image must have.
common_dirs() {
	mkdir -p "$1/proc" "$1/sys" "$1/dev" "$1/tmp" "$1/root" "$1/etc"
	chmod 1777 "$1/tmp"
	chmod 0700 "$1/root"
}

preseed_ok() {
	[ -d "$PRESEED_DIR" ] && [ -f "$PRESEED_LOG" ] && grep -qx 'rc=0' "$PRESEED_LOG"
}

debian_running() {
	pgrep -f 'debootstrap.*debian-build' >/dev/null 2>&1
}

# debootstrap_tree NAME PACKAGES DIR: a minbase tree with PACKAGES in DIR, tried
# twice (a mirror hiccup should not fail a fresh machine's setup).
debootstrap_tree() {
	attempt=1
	while :; do
		rm -rf "$3"
		log "image $1: debootstrap $SUITE with $2 (attempt $attempt, log $3.log)"
		if with_progress "image $1: debootstrap" "$3.log" debootstrap --variant=minbase --include="$2" "$SUITE" "$3" "$DEBIAN_MIRROR"; then
			break
		fi
		if [ "$attempt" -ge 2 ]; then
			tail -n 20 "$3.log" >&2 || true
			rm -rf "$3"
			die "debootstrap of image $1 from $DEBIAN_MIRROR failed twice; see $3.log (network? mirror?)"
		fi
		attempt=$((attempt + 1))
		sleep 3
	done
	rm -f "$3.log"
}

# add_e2b_user TREE: the account E2B's base image has (and E2B clients expect):
# user, uid/gid 1000, home /home/user, bash, passwordless sudo.
add_e2b_user() {
	if ! chroot "$1" getent passwd user >/dev/null; then
		chroot "$1" groupadd -g 1000 user
		chroot "$1" useradd -m -u 1000 -g 1000 -d /home/user -s /bin/bash user
	fi
	printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$1/etc/sudoers.d/user"
	chmod 0440 "$1/etc/sudoers.d/user"
}

# DEBIAN_EXTRA: the debian image's packages beyond python3 and git, each with
# a file that shows it is there (E2B clients expect sudo, `python` and curl).
DEBIAN_EXTRA="sudo:/usr/bin/sudo python-is-python3:/usr/bin/python curl:/usr/bin/curl"

# debian_missing TREE: the DEBIAN_EXTRA packages TREE lacks, space-separated.
debian_missing() {
	for pf in $DEBIAN_EXTRA; do
		[ -e "$1/${pf#*:}" ] || printf ' %s' "${pf%%:*}"
	done
}

# debian_add TREE: installs the DEBIAN_EXTRA packages TREE lacks with its own apt.
debian_add() {
	missing=$(debian_missing "$1")
	[ -n "$missing" ] || return 0
	log "image debian: adding$missing"
	chroot "$1" apt-get update -q >/dev/null &&
		# shellcheck disable=SC2086
		chroot "$1" apt-get install -y -q -o Dpkg::Use-Pty=0 --no-install-recommends $missing >/dev/null ||
		die "debian tree $1: installing$missing failed"
}

# debian_finish TREE IMG T0: cleans TREE, makes it IMG's rootfs and writes the manifest.
debian_finish() {
	chroot "$1" apt-get clean >/dev/null 2>&1 || true
	rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin
	common_dirs "$1"
	install_rootfs "$1" "$2"
	write_manifest "$2" debian "Debian $SUITE minbase + python3 (python) + git + sudo + curl, user (uid 1000)"
	log "image debian: built in $(since "$3")"
}

build_debian() {
	img="$DSEC_IMAGES_DIR/debian"
	# An image from before the user account (E2B's base has one) is rebuilt;
	# one that lacks only DEBIAN_EXTRA packages gets them in a copy, far
	# faster than a new debootstrap.
	if [ -f "$img/image.json" ] && [ -d "$img/rootfs" ] && grep -q '^user:x:1000:' "$img/rootfs/etc/passwd" &&
		[ -f "$img/rootfs/etc/sudoers.d/user" ]; then
		if [ -z "$(debian_missing "$img/rootfs")" ]; then
			log "image debian: cached"
			return 0
		fi
		t=$(now)
		tree="$DSEC_IMAGES_DIR/.debian-build.$$"
		rm -rf "$tree"
		cp -a "$img/rootfs" "$tree"
		debian_add "$tree"
		debian_finish "$tree" "$img" "$t"
		return 0
	fi
	t=$(now)
	tree=""
	# Reuse the lead's debootstrap when it is (or will be) usable.
	if [ -d "$PRESEED_DIR" ] && debian_running; then
		log "image debian: waiting for running debootstrap into $PRESEED_DIR"
		while debian_running; do sleep 2; done
		# The log line "rc=N" is written right after debootstrap exits.
		i=0
		while [ "$i" -lt 30 ] && ! grep -q '^rc=' "$PRESEED_LOG" 2>/dev/null; do
			sleep 1; i=$((i + 1))
		done
	fi
	if preseed_ok; then
		log "image debian: reusing finished debootstrap in $PRESEED_DIR"
		tree=$PRESEED_DIR
	else
		tree="$DSEC_IMAGES_DIR/.debian-build.$$"
		debootstrap_tree debian python3,git,ca-certificates,sudo,python-is-python3,curl "$tree"
	fi
	[ -x "$tree/bin/sh" ] && [ -e "$tree/usr/bin/python3" ] && [ -e "$tree/usr/bin/git" ] ||
		die "debian tree $tree lacks /bin/sh, python3 or git"
	# A preseeded tree may predate packages of the list.
	debian_add "$tree"
	add_e2b_user "$tree"
	debian_finish "$tree" "$img" "$t"
}

build_busybox() {
	img="$DSEC_IMAGES_DIR/busybox"
	if [ -f "$img/image.json" ] && [ -d "$img/rootfs" ]; then
		log "image busybox: cached"
		return 0
	fi
	t=$(now)
	bb=/bin/busybox
	[ -x "$bb" ] || die "$bb missing (busybox-static not installed?)"
	tree="$DSEC_IMAGES_DIR/.busybox-build.$$"
	rm -rf "$tree"
	mkdir -p "$tree/bin"
	cp "$bb" "$tree/bin/busybox"
	chmod 0755 "$tree/bin/busybox"
	for a in $("$bb" --list); do
		[ "$a" = busybox ] || ln -sf busybox "$tree/bin/$a"
	done
	common_dirs "$tree"
	cat >"$tree/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
	cat >"$tree/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
	install_rootfs "$tree" "$img"
	write_manifest "$img" busybox "busybox-static, one symlink per applet"
	log "image busybox: built in $(since "$t")"
}

# The judge image (FnCall's default environment): compilers and interpreters for
# the online-judge languages. golang-go adds ~250 MB and a minute to the build;
# SandboxFusion's Python packages and the other languages' toolchains
# (scripts/judge-language-packages.txt) bring the image to ~5.5 GB.
JUDGE_PACKAGES=python3,gcc,g++,libc6-dev,golang-go,bash
# Its Python packages (SandboxFusion's runtime) and further language runtimes,
# from Debian: one list file each.
JUDGE_LISTS="$(dirname "$0")/judge-python-packages.txt $(dirname "$0")/judge-language-packages.txt"

# judge_python_packages prints the list files' packages, one line.
judge_python_packages() {
	# shellcheck disable=SC2086 # two file names
	sed -e 's/#.*//' $JUDGE_LISTS | tr -s ' \t\n' ' ' | sed -e 's/^ //' -e 's/ $//'
}

# JUDGE_GO_ENV is the Go environment of FnCall's go and go_test runs
# (internal/backend/fncall/judge.go, internal/frontend/sandboxfusion/runcode.go).
JUDGE_GO_ENV="GOPATH=/usr/share/gocode GO111MODULE=off CGO_ENABLED=0 GOPROXY=off"

# judge_go_install TREE: the standard library and testify (with its
# dependencies) compiled and installed as the runs build them (CGO_ENABLED=0,
# GOPATH mode), so that a go or go_test run compiles only its own files:
# Debian's installed standard library is built with cgo, so without this every
# run recompiled net, crypto/tls and net/http (which testify imports), ~6 s of
# a go_test call here.
judge_go_install() {
	mount -t proc proc "$1/proc" || die "image judge: cannot mount /proc in $1"
	# shellcheck disable=SC2016 # expanded inside the tree
	if ! chroot "$1" env $JUDGE_GO_ENV GOCACHE=/w/tmp/.gocache HOME=/w/tmp sh -c \
		'go install std && go install $(go list -deps github.com/stretchr/testify/... | grep "\.")'; then
		umount "$1/proc" || true
		die "image judge: installing Go's standard library and testify failed"
	fi
	umount "$1/proc" || die "image judge: cannot unmount $1/proc"
	rm -rf "$1/w/tmp/.gocache"
}

build_judge() {
	img="$DSEC_IMAGES_DIR/judge"
	pyp=$(judge_python_packages)
	# Cached only when built with the same packages (an image built
	# before the list existed has no record, and is rebuilt).
	if [ -f "$img/image.json" ] && [ -d "$img/rootfs" ] && [ "$(cat "$img/extra-packages" 2>/dev/null)" = "$pyp" ]; then
		if [ ! -f "$img/go-installed" ]; then
			log "image judge: installing Go's standard library and testify for CGO_ENABLED=0"
			judge_go_install "$img/rootfs"
			: >"$img/go-installed"
		fi
		log "image judge: cached"
		return 0
	fi
	t=$(now)
	tree="$DSEC_IMAGES_DIR/.judge-build.$$"
	debootstrap_tree judge "$JUDGE_PACKAGES" "$tree"
	log "image judge: apt-get install $(echo "$pyp" | wc -w) Python and language packages (log $tree.apt.log)"
	# The JDK's configuration runs java, which needs /proc.
	mount -t proc proc "$tree/proc" || die "image judge: cannot mount /proc in $tree"
	if ! with_progress "image judge: Python and language packages" "$tree.apt.log" chroot "$tree" sh -c \
		"apt-get update && apt-get install -y --no-install-recommends $pyp"; then
		umount "$tree/proc" || true
		tail -n 20 "$tree.apt.log" >&2 || true
		rm -rf "$tree"
		die "image judge: installing the Python and language packages failed; see $tree.apt.log"
	fi
	umount "$tree/proc" || die "image judge: cannot unmount $tree/proc"
	rm -f "$tree.apt.log"
	for b in /bin/sh /bin/bash /usr/bin/python3 /usr/bin/gcc /usr/bin/g++ /usr/bin/go /usr/bin/node /usr/bin/php \
		/usr/bin/ruby /usr/bin/lua5.4 /usr/bin/perl /usr/bin/rustc /usr/bin/java /usr/bin/javac /usr/bin/jar \
		/usr/share/java/javatuples.jar /usr/share/java/junit-platform-console-standalone.jar \
		/usr/share/nodejs/typescript /usr/share/kotlin/kotlinc/lib/kotlin-compiler.jar /usr/bin/scalac \
		/usr/share/scala-2.11/lib/scala-library.jar /usr/bin/Rscript /usr/bin/mcs /usr/bin/mono /usr/bin/racket \
		/usr/bin/gdc /usr/bin/iverilog /usr/bin/vvp /usr/bin/pytest; do
		# inside the tree: Debian's alternatives (php, lua) are absolute symlinks
		chroot "$tree" test -e "$b" || die "judge tree $tree lacks $b"
	done
	chroot "$tree" python3 -c 'import numpy, scipy, pandas, sympy, networkx, requests, matplotlib, sklearn' ||
		die "image judge: SandboxFusion's common Python packages do not import"
	chroot "$tree" apt-get clean >/dev/null 2>&1 || true
	rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/apt/*.bin
	common_dirs "$tree"
	# FnCall's layout: /w is the per-run work directory (a fresh tmpfs) and /tmp
	# lives in it, so the read-only image can be the root as one bind mount.
	mkdir -p "$tree/w/tmp"
	chmod 0755 "$tree/w"
	chmod 1777 "$tree/w/tmp"
	rm -rf "$tree/tmp"
	ln -s /w/tmp "$tree/tmp"
	judge_go_install "$tree"
	install_rootfs "$tree" "$img"
	printf '%s' "$pyp" >"$img/extra-packages"
	: >"$img/go-installed"
	write_manifest "$img" judge "Debian $SUITE minbase + python3 (SandboxFusion's packages: scripts/judge-python-packages.txt), gcc, g++, golang-go, bash, scripts/judge-language-packages.txt (FnCall)"
	log "image judge: built in $(since "$t")"
}

# ---- microVM guest kernel ----------------------------------------------------
# The microvm backend (internal/backend/vm) boots Debian's kernel without installing it
# on the host: the linux-image package is downloaded and unpacked, its vmlinuz
# decompressed to an ELF vmlinux (QEMU boots it through PVH, skipping the
# decompressor: ~4 s less under TCG) and the modules the guest agent loads
# (virtio-mmio, blk, console, balloon; erofs, overlay; they are all =m in
# Debian's config) copied flat into $DSEC_VM_DIR/modules, plus virtio-net and its
# dependencies, which no VM loads: the VM escape probes' weakened VM gets a network.
DSEC_VM_DIR=${DSEC_VM_DIR:-/var/lib/dsec/vm}
VM_MODULES="crc32c_generic libcrc32c virtio_ring virtio virtio_mmio virtio_blk virtio_console virtio_balloon erofs overlay failover net_failover virtio_net"

build_vm_kernel() {
	if [ -f "$DSEC_VM_DIR/kernel.json" ]; then
		log "vm kernel: cached"
		return 0
	fi
	t=$(now)
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
	[ -n "$pkg" ] || { apt-get update -q >/dev/null; pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1); }
	[ -n "$pkg" ] || die "vm kernel: no linux-image-*-amd64 package found"
	work="$DSEC_VM_DIR/.build.$$"
	rm -rf "$work"
	mkdir -p "$work/x" "$work/out/modules"
	(cd "$work" && apt-get download "$pkg" >/dev/null 2>&1) || die "vm kernel: apt-get download $pkg failed"
	dpkg-deb -x "$work"/*.deb "$work/x"
	kver=$(ls "$work/x/lib/modules")
	python3 - "$work/x/boot/vmlinuz-$kver" "$work/out/vmlinux" <<'PY'
import lzma, sys
d = open(sys.argv[1], 'rb').read()
i = d.find(b'\xfd7zXZ\x00')
if i < 0:
    sys.exit("no xz stream in " + sys.argv[1])
out = lzma.LZMADecompressor().decompress(d[i:])
if out[:4] != b'\x7fELF':
    sys.exit("decompressed kernel is not an ELF")
open(sys.argv[2], 'wb').write(out)
PY
	cp "$work/x/boot/config-$kver" "$work/out/config"
	for m in $VM_MODULES; do
		f=$(find "$work/x/lib/modules/$kver" -name "$m.ko" | head -1)
		[ -n "$f" ] || die "vm kernel: module $m missing from $pkg"
		cp "$f" "$work/out/modules/$m.ko"
	done
	printf '%s\n' $VM_MODULES >"$work/out/modules/order"
	printf '{"package":"%s","release":"%s","kernel":"vmlinux"}\n' "$pkg" "$kver" >"$work/out/kernel.json"
	mkdir -p "$DSEC_VM_DIR"
	rm -rf "$DSEC_VM_DIR/modules" "$DSEC_VM_DIR/vmlinux"
	mv "$work/out/modules" "$work/out/vmlinux" "$work/out/config" "$DSEC_VM_DIR/"
	mv "$work/out/kernel.json" "$DSEC_VM_DIR/kernel.json"
	rm -rf "$work"
	log "vm kernel: $pkg ($kver) in $DSEC_VM_DIR in $(since "$t")"
}

if [ "$MODE" = demo ]; then
	build_debian
	log "demo setup done in $(since "$T0") (images in $DSEC_IMAGES_DIR; \`make setup\` builds the rest)"
	exit 0
fi
build_vm_kernel
build_busybox
build_debian
build_judge
# E2B's code interpreter template "code-interpreter-v1": the judge image plus a
# small layer (a separate, idempotent step).
DSEC_IMAGES_DIR="$DSEC_IMAGES_DIR" sh "$(dirname "$0")/codeint-image.sh"
# SandboxFusion's jest runtime "sandboxfusion-jest": the judge tree hard-linked
# plus SandboxFusion's npm project, pinned by scripts/sandboxfusion-jest
# (a separate, idempotent step; npm's registry at build time).
DSEC_IMAGES_DIR="$DSEC_IMAGES_DIR" sh "$(dirname "$0")/jest-image.sh"
# E2B's desktop template "desktop" as @e2b/desktop drives it (Xvfb, XFCE,
# xdotool, ...): the image "e2b-desktop", the debian image plus a layer.
DSEC_IMAGES_DIR="$DSEC_IMAGES_DIR" sh "$(dirname "$0")/desktop-image.sh"
# The fullvm base image "desktop" (a separate, idempotent step).
DSEC_IMAGES_DIR="$DSEC_IMAGES_DIR" DEBIAN_MIRROR="$DEBIAN_MIRROR" sh "$(dirname "$0")/fullvm-image.sh"

log "done in $(since "$T0") (images in $DSEC_IMAGES_DIR)"
