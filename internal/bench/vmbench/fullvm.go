package vmbench

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/vm/fullvm"
)

// FullVMResult is `dsec bench vm --backend fullvm`: create → Start returns
// (CreateAgent: the guest agent answers, and for an image that draws a
// desktop, the desktop is drawn), and create → the desktop visible in a
// screenshot, one VM at a time.
type FullVMResult struct {
	Accel        string  `json:"accel"`
	AccelReason  string  `json:"accel_reason"`
	GuestMemMiB  int64   `json:"guest_memory_mib"`
	CreateAgent  Stat    `json:"create_to_agent"`
	CreateScreen Stat    `json:"create_to_desktop_screenshot"`
	Screenshot   Stat    `json:"screenshot"`
	RunsMs       []int64 `json:"create_to_desktop_runs_ms"`
}

// RunFullVM boots o.N full VMs of the desktop image one after another.
func RunFullVM(ctx context.Context, o Options) (FullVMResult, error) {
	if o.N <= 0 {
		o.N = 3
	}
	if o.Image == "" || o.Image == "busybox" {
		o.Image = fullvm.DefaultImage
	}
	if o.ImagesDir == "" {
		o.ImagesDir = fullvm.DefaultImagesDir
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 512
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir, err := os.MkdirTemp("", "dsec-bench-fullvm-")
	if err != nil {
		return FullVMResult{}, err
	}
	defer os.RemoveAll(dir)
	d, err := fullvm.New(fullvm.Config{StateDir: dir, Logger: o.Logger})
	if err != nil {
		return FullVMResult{}, err
	}
	a := d.Accel(ctx)
	res := FullVMResult{Accel: a.Accel, AccelReason: a.Reason, GuestMemMiB: o.MemoryMiB}
	layers := []driver.Layer{{Kind: driver.LayerDir, Path: filepath.Join(o.ImagesDir, o.Image, "rootfs")}}
	var agent, screen, shot []time.Duration
	for i := 0; i < o.N; i++ {
		t0 := time.Now()
		inst, err := d.Start(ctx, driver.Spec{ID: fmt.Sprintf("bench-fv-%d", i), Image: o.Image, Layers: layers, CPU: 1, Memory: o.MemoryMiB << 20})
		if err != nil {
			return res, err
		}
		agent = append(agent, time.Since(t0))
		err = waitDesktop(ctx, inst, &shot)
		took := time.Since(t0)
		_ = inst.Destroy(context.Background())
		if err != nil {
			return res, err
		}
		screen = append(screen, took)
		res.RunsMs = append(res.RunsMs, took.Milliseconds())
	}
	res.CreateAgent, res.CreateScreen, res.Screenshot = stat(agent), stat(screen), stat(shot)
	return res, nil
}

// waitDesktop polls screenshots (every 250 ms) until the desktop shows,
// for at most fullvm's boot timeout.
func waitDesktop(ctx context.Context, inst driver.Instance, shots *[]time.Duration) error {
	s, ok := inst.(driver.Screenshotter)
	if !ok {
		return fmt.Errorf("bench: the instance takes no screenshots")
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		t := time.Now()
		b, err := s.Screenshot(ctx)
		if err != nil {
			return err
		}
		*shots = append(*shots, time.Since(t))
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("bench: screenshot: %w", err)
		}
		ok, why := fullvm.DesktopShown(img)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: no desktop after 3 minutes (%s)", why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
