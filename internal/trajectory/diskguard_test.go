package trajectory

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestPebbleDiskReserve: with free space under the reserve a new step is
// refused with resource_exhausted and a retry delay, and nothing is logged;
// a step already begun still finishes while free space is above a quarter of
// the reserve; with room again, steps are logged.
func TestPebbleDiskReserve(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "log")
	p, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	begin := func(n int) error {
		_, err := p.Begin(ctx, BeginRequest{Trajectory: "t", N: n, Op: OpExec, Fingerprint: "f", SandboxID: "sb"})
		return err
	}
	if err := begin(1); err != nil {
		t.Fatal(err)
	}
	// The disk "fills": free space is under the reserve but over its quarter.
	p.reserve = 2 * free
	err = begin(2)
	if !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("begin on a full disk: %v, want resource_exhausted", err)
	}
	if d, ok := errdefs.RetryAfter(err); !ok || d <= 0 {
		t.Errorf("refusal carries no retry delay: %v", err)
	}
	if err := p.Finish(ctx, "t", 1, Result{Status: 200, Body: []byte("out"), BodySize: 3}, time.Now()); err != nil {
		t.Fatalf("finishing a begun step with the reserve's quarter free: %v", err)
	}
	p.reserve = DefaultDiskReserve
	if err := begin(2); err != nil {
		t.Fatalf("begin with room again: %v", err)
	}
	_, steps, err := p.Get(ctx, "t")
	if err != nil || len(steps) != 2 || steps[0].State != api.StepFinished {
		t.Fatalf("log after the refusal: %+v %v", steps, err)
	}
}
