#!/bin/sh
# The cgroup-v2 proof (make test-cgv2): boots Debian bookworm's 6.1 kernel (the
# one the microVM backend uses) under QEMU TCG with the cgroup v1 hierarchies
# disabled (cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1) and runs, as
# root inside it, a subset of the host-dependent suites: the container
# conformance suite (busybox), the escape probes and the network-policy tests.
#
# The guest sees the host's /usr, /etc and the source tree read-only over 9p; the test
# binaries (go test -c on the host), the busybox and debian images and the
# kernel's modules are on an ext4 disk made with mkfs.ext4 -d. Its result is the
# exit status of the test binaries, printed on the serial console.
#
# Needs root, qemu-system-x86_64, mkfs.ext4 and a static busybox. The kernel
# package is downloaded once (apt-get download) into $DSEC_CGV2_DIR.
set -eu

GO=${GO:-go}
CACHE=${DSEC_CGV2_DIR:-/var/lib/dsec/cgv2}
IMAGES=${DSEC_IMAGES_DIR:-/var/lib/dsec/images}
KPKG=${DSEC_CGV2_KERNEL:-$(sed -n 's/.*"package":"\([^"]*\)".*/\1/p' /var/lib/dsec/vm/kernel.json 2>/dev/null)}
MEM=${DSEC_CGV2_MEM:-4096}
TIMEOUT=${DSEC_CGV2_TIMEOUT:-900}
# The subset: what a cgroup v2 host changes (cgroups, devices, mounts, nftables).
RUN_CONTAINER=${DSEC_CGV2_RUN_CONTAINER:-'^(TestConformance|TestEscapeProbes|TestRecoverAfterInitKilled|TestInitFromTemplate)$/^(busybox|debian|userns=.*)$'}
RUN_NETPOLICY=${DSEC_CGV2_RUN_NETPOLICY:-.}
RUN_CGROUPS=${DSEC_CGV2_RUN_CGROUPS:-.}
# Tests to leave out (none by default: what this kernel lacks, e.g. tmpfs
# user xattrs before 6.6, skips through hostfeat and .ci/skips.allow).
SKIP_CONTAINER=${DSEC_CGV2_SKIP_CONTAINER:-}

log() { printf 'cgv2: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root"
[ -n "$KPKG" ] || die "no guest kernel package (run scripts/setup.sh for /var/lib/dsec/vm/kernel.json)"
BB=$(command -v busybox) || die "needs a static busybox"
root=$(cd "$(dirname "$0")/.." && pwd)

# ---- the kernel and all its modules, once ---------------------------------
kdir="$CACHE/$KPKG"
if [ ! -f "$kdir/ready" ]; then
	log "downloading $KPKG"
	rm -rf "$kdir" && mkdir -p "$kdir/x"
	(cd "$kdir" && apt-get download "$KPKG" >/dev/null 2>&1) || die "apt-get download $KPKG failed"
	dpkg-deb -x "$kdir"/*.deb "$kdir/x"
	rm -f "$kdir"/*.deb
	kver=$(ls "$kdir/x/lib/modules")
	k="$kdir/x/lib/modules/$kver/kernel"
	# Hardware the guest has none of.
	rm -rf "$k/sound" "$k/drivers/gpu" "$k/drivers/media" "$k/drivers/net/wireless" \
		"$k/drivers/infiniband" "$k/drivers/staging" "$k/drivers/scsi" "$k/drivers/usb" \
		"$k/drivers/bluetooth" "$k/drivers/hid" "$k/drivers/iio" "$k/drivers/input"
	"$BB" depmod -b "$kdir/x" "$kver"
	echo "$kver" >"$kdir/ready"
fi
kver=$(cat "$kdir/ready")
mods="$kdir/x/lib/modules/$kver"

work=$(mktemp -d /var/tmp/dsec-cgv2.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---- the initramfs: busybox, the modules to reach 9p and ext4, /init --------
ir="$work/initramfs"
mkdir -p "$ir/bbin" "$ir/lib/modules/$kver"
cp "$BB" "$ir/bbin/busybox"
cp "$mods"/modules.* "$ir/lib/modules/$kver/"
for m in virtio_pci 9pnet_virtio 9p virtio_blk crc32c_generic ext4; do
	for f in $(sed -n "s|^\(kernel/.*/$m\.ko\):\(.*\)|\1\2|p" "$mods/modules.dep"); do
		mkdir -p "$ir/lib/modules/$kver/$(dirname "$f")"
		cp "$mods/$f" "$ir/lib/modules/$kver/$f"
	done
done
cp "$root/scripts/cgv2-init.sh" "$ir/init"
chmod 755 "$ir/init"
(cd "$ir" && find . | "$BB" cpio -o -H newc 2>/dev/null) | gzip -1 >"$work/initrd"

# ---- the disk: test binaries, images, modules ------------------------------
d="$work/disk"
mkdir -p "$d/bin" "$d/images" "$d/modules" "$work/out"
log "building test binaries"
(cd "$root" && make -s init >/dev/null)
(cd "$root" && $GO test -c -o "$d/bin/container.test" ./internal/backend/container)
(cd "$root" && $GO test -c -o "$d/bin/netpolicy.test" ./internal/netpolicy)
(cd "$root" && $GO test -c -o "$d/bin/cgroups.test" ./internal/cgroups)
(cd "$root" && CGO_ENABLED=0 $GO build -o "$d/bin/dsec-escape-probe" ./internal/escapeprobe/cmd/dsec-escape-probe)
(cd "$root" && $GO build -o "$d/bin/dsecd" ./cmd/dsecd)
for img in busybox debian; do
	[ -d "$IMAGES/$img" ] || die "image $img missing in $IMAGES (make setup)"
	cp -al "$IMAGES/$img" "$d/images/$img" 2>/dev/null || cp -a "$IMAGES/$img" "$d/images/$img"
done
cp -al "$mods" "$d/modules/$kver" 2>/dev/null || cp -a "$mods" "$d/modules/$kver"
# -test.v=test2json: the host turns the logs into go test -json for testreport.
cat >"$d/run.sh" <<EOF
set -o pipefail
/disk/bin/dsecd doctor
export DSEC_ESCAPE_PROBE=/disk/bin/dsec-escape-probe
cd $root/internal/backend/container && /disk/bin/container.test -test.v=test2json -test.count=1 -test.timeout=20m \\
	-test.run '$RUN_CONTAINER' -test.skip '$SKIP_CONTAINER' 2>&1 | tee /out/container.log
rc1=\$?
cd $root/internal/netpolicy && /disk/bin/netpolicy.test -test.v=test2json -test.count=1 -test.timeout=10m \\
	-test.run '$RUN_NETPOLICY' 2>&1 | tee /out/netpolicy.log
rc2=\$?
cd $root/internal/cgroups && /disk/bin/cgroups.test -test.v=test2json -test.count=1 -test.timeout=10m \\
	-test.run '$RUN_CGROUPS' 2>&1 | tee /out/cgroups.log
rc3=\$?
echo "cgv2: container rc=\$rc1 netpolicy rc=\$rc2 cgroups rc=\$rc3"
[ \$rc1 = 0 ] && [ \$rc2 = 0 ] && [ \$rc3 = 0 ]
EOF
size=$(du -sm "$d" | cut -f1)
mkfs.ext4 -q -F -L dsec-cgv2 -d "$d" "$work/disk.img" "$((size + 2048))M"

# ---- boot ------------------------------------------------------------------
log "booting $kver (TCG, cgroup v2 only)"
t0=$(date +%s)
timeout "$TIMEOUT" qemu-system-x86_64 -nodefaults -no-user-config -nographic -no-reboot \
	-M q35 -accel tcg -cpu max -smp "$(nproc)" -m "$MEM" \
	-kernel "$kdir/x/boot/vmlinuz-$kver" -initrd "$work/initrd" \
	-append "console=ttyS0 panic=-1 quiet loglevel=4 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 dsec.root=$root" \
	-serial stdio -device virtio-rng-pci \
	-drive file="$work/disk.img",if=virtio,format=raw,cache=unsafe \
	-virtfs local,path=/,mount_tag=host,security_model=passthrough,readonly=on \
	-virtfs local,path="$root",mount_tag=src,security_model=passthrough,readonly=on \
	-virtfs local,path="$work/out",mount_tag=out,security_model=none \
	</dev/null | tee "$work/console.log" || true
t1=$(date +%s)
log "guest ran $((t1 - t0)) s"
rc=$(sed -n 's/.*cgv2-result rc=\([0-9]*\).*/\1/p' "$work/console.log" | tail -1)
[ -n "$rc" ] || die "the guest printed no result (timeout ${TIMEOUT}s or crash)"
# The same strictness as make test: failures and skips not on .ci/skips.allow.
mod=$(cd "$root" && $GO list -m)
for p in backend/container netpolicy cgroups; do
	log=$work/out/$(basename "$p").log
	[ -f "$log" ] || die "no $(basename "$p").log from the guest"
	(cd "$root" && $GO tool test2json -p "$mod/internal/$p" <"$log")
done >"$work/tests.json"
(cd "$root" && $GO run ./scripts/testreport -allow .ci/skips.allow <"$work/tests.json") || rc=1
exit "$rc"
