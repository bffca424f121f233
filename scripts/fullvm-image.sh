#!/bin/sh
# fullvm-image.sh: build the FullVM base image "desktop" once (setup.sh runs it).
#
# A bookworm debootstrap (minbase) with Debian's kernel, systemd, Xorg
# (modesetting on q35's std VGA through bochs-drm), an xterm in an X session
# of the unprivileged user "dsec" (uid 1000): getty autologins it on tty1 and
# its login shell runs startx there; rootless Xorg opens the display and the
# input devices through logind (no display manager, no setuid X wrapper), and
# dsec-vmagent.service, which runs
# the guest agent the host hands in through fw_cfg (opt/dsec/vmagent), so the
# agent always matches the daemon (installed at each start into
# /usr/local/sbin: /run is noexec). It lands in $DSEC_IMAGES_DIR/desktop:
#   image.json, rootfs/   a directory image like the others (containers can use it)
#   fullvm/disk.qcow2     the same tree as an ext4 file system (no partition
#                         table), shrunk to about its files: the shared base of
#                         every fullvm overlay (the host sizes each overlay by
#                         disk_bytes and the guest agent grows / over it)
#   fullvm/vmlinuz, fullvm/initrd.img, fullvm/boot.json
# Idempotent: returns at once when the image exists in this format (FORMAT,
# recorded in boot.json; an older image is rebuilt).
set -eu
DSEC_IMAGES_DIR=${DSEC_IMAGES_DIR:-/var/lib/dsec/images}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
NAME=desktop
OUT="$DSEC_IMAGES_DIR/$NAME"
FORMAT=2
PKGS="linux-image-amd64,systemd-sysv,udev,kmod,dbus,libpam-systemd,xserver-xorg-core,xserver-xorg-input-libinput,xinit,xterm,x11-xserver-utils,xfonts-base,busybox-static"

# shellcheck source=scripts/progress.sh
. "$(dirname "$0")/progress.sh"

log() { printf 'fullvm-image: %s\n' "$*" >&2; }
die() { printf 'fullvm-image: ERROR: %s\n' "$*" >&2; exit 1; }

# write_manifest DIR: DIR/image.json. Its labels record that the image's
# sandboxes run on the fullvm backend and that E2B's API knows it as template
# "desktop-fullvm" (E2B's "desktop" is the container image e2b-desktop,
# scripts/desktop-image.sh; internal/frontend/e2b/templates.go).
write_manifest() {
	printf '{"name":"%s","lower":["rootfs"],"config":{"labels":{"dsec.backend":"fullvm","dsec.e2b.template":"desktop-fullvm"}},"created":"%s","description":"bookworm with Xorg and xterm; fullvm boots its fullvm/disk.qcow2"}\n' "$NAME" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$1/image.json.tmp"
	mv -f "$1/image.json.tmp" "$1/image.json"
}

if [ -f "$OUT/fullvm/boot.json" ] && [ -f "$OUT/image.json" ] && grep -q "\"format\":$FORMAT[,}]" "$OUT/fullvm/boot.json"; then
	grep -q '"dsec.backend"' "$OUT/image.json" || write_manifest "$OUT"
	log "cached ($OUT)"
	exit 0
fi
t0=$(date +%s)
command -v qemu-img >/dev/null || die "qemu-img missing (apt-get install qemu-utils)"
work=${DSEC_FULLVM_BUILD:-/var/lib/dsec/fullvm/.build}
root="$work/root"
if [ ! -f "$work/debootstrap.ok" ]; then
	rm -rf "$work"
	mkdir -p "$work"
	with_progress "fullvm image: debootstrap" "$work/debootstrap.log" debootstrap --variant=minbase --include="$PKGS" bookworm "$root" "$DEBIAN_MIRROR" ||
		{ tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
	touch "$work/debootstrap.ok"
fi
log "debootstrap done after $(( $(date +%s) - t0 ))s"

echo dsec-fullvm >"$root/etc/hostname"
printf '/dev/vda / ext4 rw,noatime 0 1\n' >"$root/etc/fstab"
cat >"$root/etc/X11/dsec-session" <<'S'
#!/bin/sh
# dsec's desktop: a solid background and one xterm over the middle of the
# screen. No window manager: X's default focus (PointerRoot) gives the keys to
# the window under the pointer, which starts in the middle.
xsetroot -solid '#2f4f6f'
exec xterm -fn 9x15 -bg white -fg black -geometry 90x36+64+48 -title dsec-term
S
chmod 755 "$root/etc/X11/dsec-session"
# The desktop user: no password (locked), autologin on tty1, whose login
# shell starts X on that VT; when X exits the shell does, and getty logs the
# user in again.
chroot "$root" useradd -m -u 1000 -s /bin/sh -G video,input,audio dsec
cat >"$root/home/dsec/.profile" <<'S'
if [ "$(tty)" = /dev/tty1 ] && [ -z "$DISPLAY" ]; then
	exec startx /etc/X11/dsec-session -- :0 vt1 -keeptty -nolisten tcp -s 0 -dpms >/tmp/dsec-x.log 2>&1
fi
S
chroot "$root" chown dsec:dsec /home/dsec/.profile
mkdir -p "$root/etc/systemd/system/getty@tty1.service.d"
cat >"$root/etc/systemd/system/getty@tty1.service.d/autologin.conf" <<'S'
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin dsec --noclear %I $TERM
Restart=always
RestartSec=1
S
cat >"$root/etc/systemd/system/dsec-vmagent.service" <<'S'
[Unit]
Description=dsec guest agent (virtio-serial port dsec.agent)
DefaultDependencies=no
After=systemd-udevd.service local-fs.target
[Service]
ExecStartPre=/sbin/modprobe -a qemu_fw_cfg virtio_console
ExecStartPre=/bin/sh -c 'f=/sys/firmware/qemu_fw_cfg/by_name/opt/dsec/vmagent/raw; for i in $$(seq 200); do [ -r $$f ] && break; sleep 0.05; done; install -m 0755 $$f /usr/local/sbin/dsec-vmagent'
ExecStart=/usr/local/sbin/dsec-vmagent --service
StandardOutput=journal+console
StandardError=journal+console
Restart=always
RestartSec=0.2
[Install]
WantedBy=sysinit.target
S
chroot "$root" systemctl enable getty@tty1.service dsec-vmagent.service >/dev/null 2>&1
chroot "$root" systemctl set-default multi-user.target >/dev/null 2>&1
# Nothing on the boot path waits for a network or a timer.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer systemd-timesyncd.service; do
	chroot "$root" systemctl mask "$u" >/dev/null 2>&1 || true
done
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"* "$root/usr/share/doc" "$root/usr/share/man"

# busybox's nc for the tools that expect one (the driver conformance suite).
ln -sf /bin/busybox "$root/usr/local/bin/nc"

kver=$(ls "$root/lib/modules" | head -1)
[ -f "$root/boot/vmlinuz-$kver" ] || die "no kernel in the image"
out="$work/out"
rm -rf "$out"
mkdir -p "$out/fullvm"
cp "$root/boot/vmlinuz-$kver" "$out/fullvm/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$out/fullvm/initrd.img"
mkfs.ext4 -q -F -L dsec-root -d "$root" "$work/root.raw" 3G
# Shrink the file system to its files plus 64 MiB (logs, the agent's copy),
# so a sandbox's free space is about its disk_bytes.
e2fsck -fy "$work/root.raw" >/dev/null 2>&1 || true
resize2fs -M "$work/root.raw" >/dev/null 2>&1 || die "resize2fs -M failed"
bs=$(dumpe2fs -h "$work/root.raw" 2>/dev/null | sed -n 's/^Block size: *//p')
bc=$(dumpe2fs -h "$work/root.raw" 2>/dev/null | sed -n 's/^Block count: *//p')
size=$(( (bs * bc + 64 * 1048576 + 1048575) / 1048576 ))M
resize2fs "$work/root.raw" "$size" >/dev/null 2>&1 || die "resize2fs $size failed"
truncate -s "$size" "$work/root.raw"
qemu-img convert -f raw -O qcow2 "$work/root.raw" "$out/fullvm/disk.qcow2"
rm -f "$work/root.raw"
secs=$(( $(date +%s) - t0 ))
printf '{"format":%d,"kernel_release":"%s","kernel":"vmlinuz","initrd":"initrd.img","disk":"disk.qcow2","root":"/dev/vda","user":"dsec","build_seconds":%d}\n' "$FORMAT" "$kver" "$secs" >"$out/fullvm/boot.json"
write_manifest "$out"
mv "$root" "$out/rootfs"
rm -rf "$OUT"
mkdir -p "$DSEC_IMAGES_DIR"
mv "$out" "$OUT"
rm -rf "$work"
log "built $OUT in ${secs}s"
