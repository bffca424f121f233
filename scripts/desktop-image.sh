#!/bin/sh
# desktop-image.sh: build the directory image "e2b-desktop" (E2B's template
# "desktop" as the @e2b/desktop SDK drives it, on the container backend) once;
# setup.sh runs it after the debian image.
#
# The SDK never uses a hypervisor display: after create it starts `Xvfb :0`
# and `startxfce4` itself through commands, then works through xdotool,
# xrandr, scrot, xdg-open and file reads. So the image is the debian image
# (python3, git, sudo and E2B's account "user", uid 1000, /home/user,
# passwordless sudo) as its base layer, read in place, plus one layer with
# that stack: Xvfb, a minimal XFCE (session, window manager, panel, desktop),
# xdotool, scrot, xrandr, xdg-utils, a terminal (xfce4-terminal), an editor
# (mousepad), a light browser (NetSurf, GTK: about 5 MB over the toolkit
# XFCE already has) and, for the SDK's stream, x11vnc and noVNC. The layer is
# the upper directory of an overlay mount of the debian tree in which apt-get
# ran (--no-install-recommends), so no file of the debian image is copied.
#
# The image records in its config labels that it is E2B's template "desktop"
# and runs on the container backend (dsec.e2b.template, dsec.backend): the
# E2B front end reads them (internal/frontend/e2b/templates.go). The image
# named "desktop" stays the FullVM desktop (scripts/fullvm-image.sh).
#
# Idempotent: returns at once when the image exists and was built on the
# debian image that is there now with these packages.
set -eu
DSEC_IMAGES_DIR=${DSEC_IMAGES_DIR:-/var/lib/dsec/images}
NAME=e2b-desktop
TEMPLATE=desktop
OUT="$DSEC_IMAGES_DIR/$NAME"
BASE="$DSEC_IMAGES_DIR/debian"
PKGS="xvfb xauth xfonts-base x11-utils x11-xserver-utils xdotool scrot xdg-utils dbus-x11 procps \
xfce4-session xfwm4 xfce4-panel xfdesktop4 xfce4-settings xfce4-terminal mousepad netsurf-gtk \
fonts-dejavu-core adwaita-icon-theme x11vnc websockify net-tools"

# shellcheck source=scripts/progress.sh
. "$(dirname "$0")/progress.sh"
# shellcheck source=scripts/overlay-image.sh
. "$(dirname "$0")/overlay-image.sh"

log() { printf 'desktop-image: %s\n' "$*" >&2; }
die() { printf 'desktop-image: ERROR: %s\n' "$*" >&2; exit 1; }

[ -f "$BASE/image.json" ] && [ -d "$BASE/rootfs" ] || die "the debian image ($BASE) is missing; setup.sh builds it first"
stamp="$(cat "$BASE/image.json") $PKGS v4"
if overlay_cached "$OUT" "$stamp"; then
	log "cached ($OUT)"
	exit 0
fi
t0=$(date +%s)
overlay_open desktop "$BASE/rootfs"
# No service starts in the chroot (dbus, for one, would stay running).
printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
chmod 0755 "$r/usr/sbin/policy-rc.d"
overlay_apt "desktop image" $PKGS
# The SDK's stream runs x11vnc and /opt/noVNC/utils/novnc_proxy (over the
# installed websockify). noVNC's web client and that script are the files of
# Debian's novnc package, unpacked there without it: the package itself
# depends on nodejs (60 MB) for scripts the stream does not run.
if ! chroot "$r" sh -c 'cd /tmp && apt-get download novnc && dpkg-deb -x novnc_*.deb /tmp/novnc && rm -f novnc_*.deb' >"$work.novnc.log" 2>&1; then
	tail -n 20 "$work.novnc.log" >&2 || true
	die "unpacking noVNC failed; see $work.novnc.log"
fi
rm -rf "$r/opt/noVNC"
mkdir -p "$r/opt"
mv "$r/tmp/novnc/usr/share/novnc" "$r/opt/noVNC"
rm -rf "$r/tmp/novnc"
rm -f "$work.novnc.log" "$r/usr/sbin/policy-rc.d"
chroot "$r" getent passwd user >/dev/null || die "the debian image has no account user"
for b in Xvfb xdpyinfo xrandr xdotool scrot xdg-open startxfce4 xfwm4 xfce4-panel xfce4-terminal netsurf-gtk x11vnc websockify netstat /opt/noVNC/utils/novnc_proxy; do
	chroot "$r" sh -c "command -v $b" >/dev/null || die "$b is not installed"
done
# xdg-open sends web pages to the browser, text files to the editor.
# XFCE's preferred browser is sensible-browser, which runs x-www-browser.
chroot "$r" update-alternatives --install /usr/bin/x-www-browser x-www-browser /usr/bin/netsurf-gtk 40 >/dev/null
mkdir -p "$r/home/user/.config"
cat >"$r/home/user/.config/mimeapps.list" <<'EOF'
[Default Applications]
text/html=netsurf-gtk.desktop
x-scheme-handler/http=netsurf-gtk.desktop
x-scheme-handler/https=netsurf-gtk.desktop
text/plain=org.xfce.mousepad.desktop
EOF
chroot "$r" chown -R user:user /home/user/.config
rm -rf "$r"/var/log/apt "$r"/var/log/dpkg.log
overlay_close
# /tmp of its own (with the X server's socket directory, which a server run
# as user cannot create).
rm -rf "$work/upper/tmp"
# Documentation and translations of the new packages only (the upper
# directory holds nothing of the debian image): about 90 MB.
rm -rf "$work/upper/usr/share/doc" "$work/upper/usr/share/man" "$work/upper/usr/share/locale"
mkdir -m 1777 "$work/upper/tmp" "$work/upper/tmp/.X11-unix"
overlay_publish "$OUT" "$stamp" "{\"version\":2,\"name\":\"$NAME\",\"description\":\"E2B's desktop template: the debian image plus Xvfb, XFCE, xdotool, scrot, xrandr, xdg-utils, xfce4-terminal, mousepad and NetSurf\",\"layers\":[{\"role\":\"base\",\"dir\":\"../debian/rootfs\"},{\"role\":\"toolkit\",\"dir\":\"layer\"}],\"config\":{\"labels\":{\"dsec.e2b.template\":\"$TEMPLATE\",\"dsec.backend\":\"container\"}},\"created\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}"
log "built in $(($(date +%s) - t0))s: $(du -sh "$OUT/layer" | cut -f1) over the debian image"
