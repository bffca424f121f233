package fullvm

import (
	"bufio"
	"bytes"
	"context"
	"image/png"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
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

func TestScreenshotShowsDesktop(t *testing.T) {
	inst := shared(t)
	b := waitDesktop(t, inst, 2*time.Minute)
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil || cfg.Width < 640 || cfg.Height < 480 {
		t.Fatalf("screenshot %dx%d (%v), want a desktop-sized PNG", cfg.Width, cfg.Height, err)
	}
	t.Logf("screenshot %dx%d, %d bytes", cfg.Width, cfg.Height, len(b))
}

// TestTypedTextReachesTerminal types a command into the xterm under the
// pointer; the shell in it writes the file the test reads through the agent.
func TestTypedTextReachesTerminal(t *testing.T) {
	inst := shared(t)
	waitDesktop(t, inst, 2*time.Minute)
	in := inst.(driver.Input)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Click into the terminal first: focus follows the pointer.
	if _, err := in.SendInput(ctx, api.InputRequest{Click: &api.Click{X: 400, Y: 300}}); err != nil {
		t.Fatalf("click: %v", err)
	}
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
	var got string
	for i := 0; i < 100; i++ {
		if rc, _, err := fs.Open(ctx, "/tmp/typed"); err == nil {
			line, _ := bufio.NewReader(rc).ReadString('\n')
			rc.Close()
			if got = line; got != "" {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got != "Hi-42\n" {
		t.Fatalf("/tmp/typed = %q, want %q (the typed command ran in the terminal)", got, "Hi-42\n")
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
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if rc, _, err := fs.Open(ctx, "/tmp/after"); err == nil {
			line, _ := bufio.NewReader(rc).ReadString('\n')
			rc.Close()
			if line == "done\n" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the marker command typed after ctrl-u and Return never ran")
		}
	}
	rc, _, err := fs.Open(ctx, "/tmp/typed")
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(rc).ReadString('\n')
	rc.Close()
	if line != "Hi-42\n" {
		t.Errorf("after ctrl-u and Return /tmp/typed = %q: the cleared line ran", line)
	}
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
