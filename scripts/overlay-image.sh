# overlay-image.sh: sourced by codeint-image.sh and desktop-image.sh, which
# build a directory image as one layer over another image's tree: an overlay
# mount of the base tree (read in place, never copied) in which apt-get runs in
# a chroot; the overlay's upper directory becomes the new image's layer.
# The sourcing script defines log and die, sets DSEC_IMAGES_DIR and sources
# progress.sh first.

# overlay_cached OUT STAMP: whether OUT holds an image built with STAMP.
overlay_cached() {
	[ -f "$1/image.json" ] && [ -d "$1/layer" ] && [ "$(cat "$1/base-stamp" 2>/dev/null)" = "$2" ]
}

# overlay_open NAME BASE_ROOTFS: mounts an overlay of BASE_ROOTFS with /proc
# at $r (the build directory is $work); everything is unmounted and removed
# when the script exits.
overlay_open() {
	work="$DSEC_IMAGES_DIR/.$1-build.$$"
	rm -rf "$work"
	mkdir -p "$work/upper" "$work/work" "$work/root"
	r="$work/root"
	trap overlay_cleanup EXIT INT TERM
	mount -t overlay overlay -o "lowerdir=$2,upperdir=$work/upper,workdir=$work/work" "$r" ||
		die "cannot mount an overlay of $2"
	mount -t proc proc "$r/proc" || die "cannot mount /proc in $r"
}

overlay_cleanup() {
	umount "$work/root/proc" 2>/dev/null || true
	umount "$work/root" 2>/dev/null || true
	rm -rf "$work"
}

# overlay_apt LABEL PKGS...: apt-get install PKGS (no recommends) in $r, its
# output in a log shown on failure.
overlay_apt() {
	oa_label=$1
	shift
	log "apt-get install $* (log $work.apt.log)"
	if ! with_progress "$oa_label: apt-get" "$work.apt.log" chroot "$r" sh -c \
		"apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $*"; then
		tail -n 20 "$work.apt.log" >&2 || true
		die "installing $* failed; see $work.apt.log"
	fi
	rm -f "$work.apt.log"
}

# overlay_close: drops apt's caches and unmounts $r; $work/upper is then the layer.
overlay_close() {
	chroot "$r" apt-get clean >/dev/null 2>&1 || true
	rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin
	umount "$r/proc"
	umount "$r"
}

# overlay_publish OUT STAMP MANIFEST: makes $work/upper OUT's layer and writes
# the stamp and the manifest (image.json, written last).
overlay_publish() {
	rm -rf "$1.old"
	if [ -d "$1" ]; then
		mv "$1" "$1.old"
	fi
	mkdir -p "$1"
	mv "$work/upper" "$1/layer"
	printf '%s' "$2" >"$1/base-stamp"
	printf '%s\n' "$3" >"$1/image.json.tmp"
	mv -f "$1/image.json.tmp" "$1/image.json"
	rm -rf "$1.old"
}
