package fullvm

import (
	"bufio"
	"bytes"
	"context"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/driver"
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
	time.Sleep(2 * time.Second)
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
