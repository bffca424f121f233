#!/bin/sh
# fullvm-image.sh: build the FullVM base image "desktop" once (setup.sh runs it).
#
# A bookworm debootstrap (minbase) with Debian's kernel, systemd, Xorg
# (modesetting on q35's std VGA through bochs-drm) and a small desktop in an
# X session of the unprivileged user "dsec" (uid 1000): XFCE's window manager
# (xfwm4) and panel (applications menu, launchers, window list, clock) over a
# solid background, an xterm open, and from the panel a file manager (Thunar),
# an editor (Mousepad) and a light browser (NetSurf), the package choice of the
# container desktop (scripts/desktop-image.sh); xdotool and xprop for scripts
# and the readiness check. getty autologins the user on tty1 and
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
FORMAT=3
PKGS="linux-image-amd64,systemd-sysv,udev,kmod,dbus,libpam-systemd,xserver-xorg-core,xserver-xorg-input-libinput,xinit,xterm,x11-xserver-utils,xfonts-base,busybox-static,\
dbus-x11,xfwm4,xfce4-panel,thunar,mousepad,netsurf-gtk,fonts-dejavu-core,adwaita-icon-theme,xdotool,x11-utils"

# shellcheck source=scripts/progress.sh
. "$(dirname "$0")/progress.sh"

log() { printf 'fullvm-image: %s\n' "$*" >&2; }
die() { printf 'fullvm-image: ERROR: %s\n' "$*" >&2; exit 1; }

# write_manifest DIR: DIR/image.json. Its labels record that the image's
# sandboxes run on the fullvm backend and that E2B's API knows it as template
# "desktop-fullvm" (E2B's "desktop" is the container image e2b-desktop,
# scripts/desktop-image.sh; internal/frontend/e2b/templates.go).
write_manifest() {
	printf '{"name":"%s","lower":["rootfs"],"config":{"labels":{"dsec.backend":"fullvm","dsec.e2b.template":"desktop-fullvm"}},"created":"%s","description":"bookworm with Xorg, xfwm4, xfce4-panel, xterm, Thunar, Mousepad and NetSurf; fullvm boots its fullvm/disk.qcow2"}\n' "$NAME" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$1/image.json.tmp"
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
# dsec's desktop: a solid background, XFCE's window manager and panel (at the
# top of the screen) and one xterm over the middle of the screen, in a D-Bus
# session of their own (xfconf, the settings store of both, is a D-Bus
# service).
if [ -z "${DBUS_SESSION_BUS_ADDRESS:-}" ]; then
	exec dbus-run-session -- "$0"
fi
xsetroot -solid '#2f4f6f'
xfwm4 --compositor=off &
xfce4-panel &
# The xterm is mapped once the window manager runs, which then gives it the
# focus (a window mapped before it would have none).
for i in $(seq 300); do
	xprop -root _NET_SUPPORTING_WM_CHECK 2>/dev/null | grep -q 'window id' && break
	sleep 0.1
done
exec xterm -fn 9x15 -bg white -fg black -geometry 90x36+64+64 -title dsec-term
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
# The panel's configuration (without one it asks on its first start): one
# panel along the top with the applications menu, launchers for the
# terminal, the file manager, the browser and the editor, the window list
# and a clock.
xml="$root/home/dsec/.config/xfce4/xfconf/xfce-perchannel-xml"
mkdir -p "$xml"
cat >"$xml/xfce4-panel.xml" <<'S'
<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfce4-panel" version="1.0">
  <property name="configver" type="int" value="2"/>
  <property name="panels" type="array">
    <value type="int" value="1"/>
    <property name="panel-1" type="empty">
      <property name="position" type="string" value="p=6;x=0;y=0"/>
      <property name="length" type="uint" value="100"/>
      <property name="position-locked" type="bool" value="true"/>
      <property name="size" type="uint" value="30"/>
      <property name="icon-size" type="uint" value="20"/>
      <property name="plugin-ids" type="array">
        <value type="int" value="1"/>
        <value type="int" value="2"/>
        <value type="int" value="3"/>
        <value type="int" value="4"/>
        <value type="int" value="5"/>
        <value type="int" value="6"/>
        <value type="int" value="7"/>
        <value type="int" value="8"/>
      </property>
    </property>
  </property>
  <property name="plugins" type="empty">
    <property name="plugin-1" type="string" value="applicationsmenu"/>
    <property name="plugin-2" type="string" value="launcher">
      <property name="items" type="array"><value type="string" value="debian-xterm.desktop"/></property>
    </property>
    <property name="plugin-3" type="string" value="launcher">
      <property name="items" type="array"><value type="string" value="thunar.desktop"/></property>
    </property>
    <property name="plugin-4" type="string" value="launcher">
      <property name="items" type="array"><value type="string" value="netsurf-gtk.desktop"/></property>
    </property>
    <property name="plugin-5" type="string" value="launcher">
      <property name="items" type="array"><value type="string" value="org.xfce.mousepad.desktop"/></property>
    </property>
    <property name="plugin-6" type="string" value="tasklist"/>
    <property name="plugin-7" type="string" value="separator">
      <property name="expand" type="bool" value="true"/>
      <property name="style" type="uint" value="0"/>
    </property>
    <property name="plugin-8" type="string" value="clock"/>
  </property>
</channel>
S
chroot "$root" chown -R dsec:dsec /home/dsec/.profile /home/dsec/.config
for f in debian-xterm thunar netsurf-gtk org.xfce.mousepad; do
	[ -f "$root/usr/share/applications/$f.desktop" ] || die "no $f.desktop for the panel's launchers"
done
for b in xfwm4 xfce4-panel thunar mousepad netsurf-gtk xdotool xprop dbus-run-session; do
	chroot "$root" sh -c "command -v $b" >/dev/null || die "$b is not installed"
done
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
# Documentation and translations (the desktop's are about 90 MB).
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"* "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale"

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
# "desktop": the fullvm backend answers a create once the panel is drawn.
printf '{"format":%d,"kernel_release":"%s","kernel":"vmlinuz","initrd":"initrd.img","disk":"disk.qcow2","root":"/dev/vda","user":"dsec","desktop":"panel","build_seconds":%d}\n' "$FORMAT" "$kver" "$secs" >"$out/fullvm/boot.json"
write_manifest "$out"
mv "$root" "$out/rootfs"
# The old image stays whole until the new one is in place (a sandbox
# starting meanwhile boots the old one).
mkdir -p "$DSEC_IMAGES_DIR"
if [ -e "$OUT" ]; then
	rm -rf "$OUT.old"
	mv "$OUT" "$OUT.old"
fi
mv "$out" "$OUT"
rm -rf "$OUT.old"
rm -rf "$work"
log "built $OUT in ${secs}s"
