package fullvm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// waitDesktop takes screenshots until the desktop shows and returns the last.
func waitDesktop(t *testing.T, inst driver.Instance, within time.Duration) []byte {
	t.Helper()
	s := inst.(driver.Screenshotter)
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, err := s.Screenshot(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("Screenshot is not a valid PNG: %v", err)
		}
		ok, why := DesktopShown(img)
		if ok {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("no desktop on the display after %v (%s)", within, why)
		}
		time.Sleep(time.Second)
	}
}

// TestCreateAnswersWhenDrawn: Start of the desktop image returns only once
// the desktop is drawn, so the first screenshot after it shows the panel
// along the top, the background and the xterm. In the guest a window
// manager runs and decorates the xterm, the panel's window is mapped, and
// the browser, the file manager and the editor of the panel's launchers
// open windows.
func TestCreateAnswersWhenDrawn(t *testing.T) {
	inst := shared(t)
	if b, err := imageBoot(sharedSp); err != nil || b.Desktop == "" {
		t.Fatalf("the desktop image in %s predates the drawn-desktop readiness (boot.json has no \"desktop\"; %v): rebuild it with scripts/fullvm-image.sh", imagesDir(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := inst.(driver.Screenshotter).Screenshot(ctx)
	if err != nil {
		t.Fatalf("Screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Screenshot is not a valid PNG: %v", err)
	}
	ok, why := DesktopShown(img)
	if !ok {
		t.Fatalf("the first screenshot after create shows no drawn desktop (%s)", why)
	}
	t.Logf("create → desktop drawn: %v (%s)", bootTook, why)

	xdo := func(args ...string) string { return execUser(t, inst, "xdotool", args...) }
	if ids := strings.Fields(xdo("search", "--onlyvisible", "--class", "xfce4-panel")); len(ids) == 0 {
		t.Errorf("no visible xfce4-panel window")
	}
	if wm := execUser(t, inst, "xprop", "-root", "_NET_SUPPORTING_WM_CHECK"); !strings.Contains(wm, "window id") {
		t.Errorf("no window manager: _NET_SUPPORTING_WM_CHECK = %q", wm)
	}
	term := strings.Fields(xdo("search", "--onlyvisible", "--class", "xterm"))
	if len(term) == 0 {
		t.Fatalf("no visible xterm")
	}
	// The window manager's frame: a title bar above the xterm.
	ext := execUser(t, inst, "xprop", "-id", term[0], "_NET_FRAME_EXTENTS")
	var l, r, top, bottom int
	if _, err := fmt.Sscanf(ext[strings.Index(ext, "=")+1:], " %d, %d, %d, %d", &l, &r, &top, &bottom); err != nil || top <= 0 {
		t.Errorf("the xterm is not decorated: %q (%v)", ext, err)
	}

	// The launchers' programs open windows (as the desktop's user).
	for _, app := range []struct{ cmd, class string }{
		{"netsurf-gtk", "netsurf"}, {"thunar", "thunar"}, {"mousepad", "mousepad"},
	} {
		// In the desktop's D-Bus session (the panel's), as its launchers
		// start them.
		p, err := inst.Exec(ctx, userProc("sh", "-c", `export "$(tr '\0' '\n' </proc/$(pidof xfce4-panel)/environ | grep ^DBUS_SESSION_BUS_ADDRESS=)"; exec "$0"`, app.cmd), driver.Stdio{})
		if err != nil {
			t.Fatalf("start %s: %v", app.cmd, err)
		}
		ids, werr := waitWindow(ctx, inst, app.class)
		// Closed again: the next tests type into the xterm.
		_ = p.Signal(int(syscall.SIGTERM))
		_, err = p.Wait(ctx)
		p.Close()
		if werr != nil {
			t.Errorf("%s opened no window: %v", app.cmd, werr)
		} else {
			t.Logf("%s: window %v", app.cmd, ids)
		}
		if err != nil {
			t.Errorf("%s after SIGTERM: %v", app.cmd, err)
		}
	}
}

// waitWindow polls (xdotool search, as the desktop's user) until a visible
// window of the class shows, for at most 90 s, and returns its ids.
func waitWindow(ctx context.Context, inst driver.Instance, class string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	last := ""
	for {
		var out, errb bytes.Buffer
		p, err := inst.Exec(ctx, userProc("xdotool", "search", "--onlyvisible", "--class", class), driver.Stdio{Stdout: &out, Stderr: &errb})
		if err == nil {
			ex, werr := p.Wait(ctx)
			p.Close()
			if ids := strings.Fields(out.String()); werr == nil && ex.Code == 0 && len(ids) > 0 {
				return ids, nil
			}
			last = strings.TrimSpace(errb.String())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no visible window of class %q within 90 s (%v; %s)", class, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func TestScreenshotShowsDesktop(t *testing.T) {
	inst := shared(t)
	b := waitDesktop(t, inst, 2*time.Minute)
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil || cfg.Width < 640 || cfg.Height < 480 {
		t.Fatalf("screenshot %dx%d (%v), want a desktop-sized PNG", cfg.Width, cfg.Height, err)
	}
	t.Logf("screenshot %dx%d, %d bytes", cfg.Width, cfg.Height, len(b))
}

// TestTypedTextReachesTerminal types a command into the xterm once a click
// has given it the input focus; the shell in it writes the file the test
// reads through the agent.
func TestTypedTextReachesTerminal(t *testing.T) {
	inst := shared(t)
	waitDesktop(t, inst, 2*time.Minute)
	in := inst.(driver.Input)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	focusTerminal(ctx, t, inst)
	res, err := in.SendInput(ctx, api.InputRequest{Text: "echo Hi-$((6*7)) > /tmp/typed\n"})
	if err != nil {
		t.Fatalf("type: %v", err)
	}
	if res.Events == 0 {
		t.Errorf("SendInput reported no events")
	}
	fs, err := inst.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	line := func(path string) string {
		rc, _, err := fs.Open(ctx, path)
		if err != nil {
			return ""
		}
		defer rc.Close()
		l, _ := bufio.NewReader(rc).ReadString('\n')
		return l
	}
	if !testwait.Until(30*time.Second, func() bool { return line("/tmp/typed") != "" }) || line("/tmp/typed") != "Hi-42\n" {
		t.Fatalf("/tmp/typed = %q, want %q (the typed command ran in the terminal); %s", line("/tmp/typed"), "Hi-42\n", focused(t, inst))
	}
	// The desktop is the unprivileged user's: what was typed ran as uid
	// 1000, while the agent's exec is root by default.
	if owner := execOut(t, inst, "stat", "-c", "%u", "/tmp/typed"); owner != "1000" {
		t.Errorf("/tmp/typed is owned by uid %q, want 1000 (the desktop runs as the user dsec)", owner)
	}
	if id := execOut(t, inst, "id", "-u"); id != "0" {
		t.Errorf("exec runs as uid %q, want 0", id)
	}
	// A key chord: ctrl-u clears a half-typed line, so this never runs.
	if _, err := in.SendInput(ctx, api.InputRequest{Text: "echo no > /tmp/typed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.SendInput(ctx, api.InputRequest{Key: "ctrl-u"}); err != nil {
		t.Fatalf("key ctrl-u: %v", err)
	}
	if _, err := in.SendInput(ctx, api.InputRequest{Key: "Return"}); err != nil {
		t.Fatalf("key Return: %v", err)
	}
	// A marker command typed next: once it has run, the shell has read (and
	// would have run) the cleared line before it.
	if _, err := in.SendInput(ctx, api.InputRequest{Text: "echo done > /tmp/after\n"}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(30*time.Second, func() bool { return line("/tmp/after") == "done\n" }) {
		t.Fatalf("the marker command typed after ctrl-u and Return never ran; %s", focused(t, inst))
	}
	if l := line("/tmp/typed"); l != "Hi-42\n" {
		t.Errorf("after ctrl-u and Return /tmp/typed = %q: the cleared line ran", l)
	}
}

// focusTerminal clicks into the xterm (the middle of its window, as the
// desktop places it) and waits until the window manager has given it the
// input focus: keys typed before that go to the window focused before.
func focusTerminal(ctx context.Context, t *testing.T, inst driver.Instance) {
	t.Helper()
	term := strings.Fields(execUser(t, inst, "xdotool", "search", "--onlyvisible", "--class", "xterm"))
	if len(term) == 0 {
		t.Fatalf("no visible xterm")
	}
	geo := map[string]int{}
	for _, kv := range strings.Fields(execUser(t, inst, "xdotool", "getwindowgeometry", "--shell", term[0])) {
		k, v, _ := strings.Cut(kv, "=")
		geo[k], _ = strconv.Atoi(v)
	}
	if geo["WIDTH"] == 0 || geo["HEIGHT"] == 0 {
		t.Fatalf("xterm %s geometry %v", term[0], geo)
	}
	click := &api.Click{X: geo["X"] + geo["WIDTH"]/2, Y: geo["Y"] + geo["HEIGHT"]/2}
	if _, err := inst.(driver.Input).SendInput(ctx, api.InputRequest{Click: click}); err != nil {
		t.Fatalf("click at %d,%d: %v", click.X, click.Y, err)
	}
	if !testwait.Until(30*time.Second, func() bool {
		return slices.Contains(term, execUser(t, inst, "xdotool", "getwindowfocus"))
	}) {
		t.Fatalf("the xterm (%v) has no input focus 30 s after a click at %d,%d; %s", term, click.X, click.Y, focused(t, inst))
	}
}

// focused names the window with the input focus and the visible windows,
// for a failure's message.
func focused(t *testing.T, inst driver.Instance) string {
	t.Helper()
	f := execUser(t, inst, "sh", "-c", "xprop -id $(xdotool getwindowfocus) WM_CLASS WM_NAME 2>&1")
	v := execUser(t, inst, "sh", "-c", `for w in $(xdotool search --onlyvisible --class ''); do
	c=$(xprop -id $w WM_CLASS 2>/dev/null | grep = | cut -d= -f2); [ -z "$c" ] || printf '%s;' "$c"; done; true`)
	return fmt.Sprintf("focused window %q, visible windows: %s", f, v)
}

func TestBadInputRefused(t *testing.T) {
	inst := shared(t)
	in := inst.(driver.Input)
	ctx := context.Background()
	for _, req := range []api.InputRequest{
		{Key: "hyperspace"},
		{Key: "ctrl-"},
		{Text: "caf\u00e9"},
		{Text: strings.Repeat("a", MaxText+1)},
		{Click: &api.Click{X: -1, Y: 5}},
		{Click: &api.Click{X: 5, Y: 100000}},
		{Click: &api.Click{X: 5, Y: 5, Button: "fourth"}},
		{},
	} {
		if _, err := in.SendInput(ctx, req); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("SendInput(%+v) = %v, want invalid_argument", req, err)
		}
	}
}

// userProc is a process of the desktop's user (uid 1000) on its display.
func userProc(args ...string) driver.ProcSpec {
	return driver.ProcSpec{Args: args, Cwd: "/home/dsec", UID: 1000, GID: 1000,
		Env: []string{"DISPLAY=:0", "HOME=/home/dsec", "XAUTHORITY=/home/dsec/.Xauthority", "PATH=/usr/local/bin:/usr/bin:/bin"}}
}

// execUser runs name with args as the desktop's user (userProc), for at
// most a minute, and returns its trimmed stdout.
func execUser(t *testing.T, inst driver.Instance, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	p, err := inst.Exec(ctx, userProc(append([]string{"timeout", "50", name}, args...)...), driver.Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %s %v: %v", name, args, err)
	}
	defer p.Close()
	if ex, err := p.Wait(ctx); err != nil || ex.Code != 0 {
		t.Fatalf("exec %s %v: %+v %v: %s", name, args, ex, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// execOut runs args in inst and returns its trimmed stdout.
func execOut(t *testing.T, inst driver.Instance, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	p, err := inst.Exec(ctx, driver.ProcSpec{Args: args, Cwd: "/"}, driver.Stdio{Stdout: &out})
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	defer p.Close()
	if ex, err := p.Wait(ctx); err != nil || ex.Code != 0 {
		t.Fatalf("exec %v: %+v %v", args, ex, err)
	}
	return strings.TrimSpace(out.String())
}

// TestDiskBytes: the guest's root file system spans the base disk plus the
// sandbox's disk_bytes (the overlay's size; the agent grew it at start).
func TestDiskBytes(t *testing.T) {
	inst := shared(t)
	b, err := imageBoot(sharedSp)
	if err != nil {
		t.Fatal(err)
	}
	base, err := qcow2Size(b.path(b.Disk))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(execOut(t, inst, "stat", "-f", "-c", "%b %a %S", "/"))
	if len(f) != 3 {
		t.Fatalf("stat -f: %q", f)
	}
	blocks, _ := strconv.ParseInt(f[0], 10, 64)
	avail, _ := strconv.ParseInt(f[1], 10, 64)
	bs, _ := strconv.ParseInt(f[2], 10, 64)
	size, want := blocks*bs, base+sharedSp.Disk
	t.Logf("root: %d MiB (%d MiB free) on a %d MiB base + disk_bytes %d MiB", size>>20, avail*bs>>20, base>>20, sharedSp.Disk>>20)
	// ext4's own metadata takes a few percent of the device.
	if size < want*95/100 || size > want {
		t.Errorf("root file system is %d bytes, want about %d (base %d + disk_bytes %d)", size, want, base, sharedSp.Disk)
	}
	if avail*bs < sharedSp.Disk*9/10 {
		t.Errorf("%d bytes free on /, want at least 90%% of disk_bytes %d", avail*bs, sharedSp.Disk)
	}
}

// TestDesktopShownNeedsPanel: the readiness check on synthetic screens. A
// flat background, or the background and the xterm without the panel (X up,
// the panel not yet drawn), is not the desktop; with a drawn panel strip it
// is.
func TestDesktopShownNeedsPanel(t *testing.T) {
	const w, h = 1024, 768
	bg := color.RGBA{0x2f, 0x4f, 0x6f, 0xff}
	screen := func(xterm, panel bool) image.Image {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				c := bg
				switch {
				case panel && y < 30:
					// a grey bar with icons and text in shades
					c = color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
					if x%97 < 16 && y > 6 && y < 22 {
						c = color.RGBA{uint8(x * 7), uint8(y * 11), 0x40, 0xff}
					}
				case xterm && x >= 64 && x < 880 && y >= 64 && y < 640:
					c = color.RGBA{0xff, 0xff, 0xff, 0xff}
					if y%16 == 0 && x < 400 {
						c = color.RGBA{0, 0, 0, 0xff}
					}
				}
				img.Set(x, y, c)
			}
		}
		return img
	}
	for _, tc := range []struct {
		name         string
		xterm, panel bool
		want         bool
	}{
		{"flat background", false, false, false},
		{"background and xterm, no panel", true, false, false},
		{"panel, no xterm", false, true, false},
		{"background, xterm and panel", true, true, true},
	} {
		ok, why := DesktopShown(screen(tc.xterm, tc.panel))
		if ok != tc.want {
			t.Errorf("%s: DesktopShown = %v (%s), want %v", tc.name, ok, why, tc.want)
		}
	}
	if ok, why := DesktopShown(image.NewRGBA(image.Rect(0, 0, w, h))); ok {
		t.Errorf("black screen: DesktopShown = true (%s)", why)
	}
}
