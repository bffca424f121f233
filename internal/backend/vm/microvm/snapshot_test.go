package microvm

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
)

// TestSnapshotRestore: the first sandbox of a launch boots and leaves a
// snapshot behind; the next ones are restored from it, each with its own
// host name, clock, random numbers and files, and leave nothing behind; a
// snapshot QEMU cannot load is dropped and the sandbox boots instead.
func TestSnapshotRestore(t *testing.T) {
	needVM(t)
	dir := filepath.Join(stateDir, "snaptest")
	d, err := New(Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	spec := func(name string) driver.Spec {
		return driver.Spec{ID: drivertest.NewID(name), Layers: imageLayers(t, "busybox"), CPU: 1, Memory: 256 << 20}
	}
	start := func(name string) *instance {
		t.Helper()
		inst, err := d.Start(ctx, spec(name))
		if err != nil {
			t.Fatal(err)
		}
		in := inst.(*instance)
		t.Cleanup(func() { _ = in.Destroy(context.Background()) })
		return in
	}
	run := func(in *instance, args ...string) string {
		t.Helper()
		r, err := drivertest.Exec(ctx, in, driver.ProcSpec{Args: args, Cwd: "/"}, "")
		if err != nil || r.Exit.Code != 0 {
			t.Fatalf("%v: %v %+v", args, err, r)
		}
		return strings.TrimSpace(r.Stdout)
	}

	first := start("snapfirst")
	if first.Restored() {
		t.Fatal("the first sandbox of a launch was restored: no snapshot should exist yet")
	}
	d.WaitSnapshots()
	snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*.snap"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots after the first boot: %v, want 1", snaps)
	}

	// Clones of one snapshot must not draw the same random numbers: the
	// first thing each runs reads 16 random bytes (without the reseed the
	// two read the same ones).
	a := start("snapa")
	ua := run(a, "/bin/cat", "/proc/sys/kernel/random/uuid")
	b := start("snapb")
	ub := run(b, "/bin/cat", "/proc/sys/kernel/random/uuid")
	if ua == ub {
		t.Errorf("two clones drew the same random uuid %s", ua)
	}
	for _, in := range []*instance{a, b} {
		if !in.Restored() {
			t.Fatalf("%s booted although its launch has a snapshot", in.id)
		}
		if h := run(in, "/bin/hostname"); h != in.id {
			t.Errorf("hostname in %s = %q", in.id, h)
		}
		g, _ := strconv.ParseInt(run(in, "/bin/date", "+%s"), 10, 64)
		if skew := time.Now().Unix() - g; skew < -5 || skew > 5 {
			t.Errorf("%s: guest clock %d s off the host's", in.id, skew)
		}
	}
	run(a, "/bin/sh", "-c", "echo mine > /tmp/f")
	if r, _ := drivertest.Exec(ctx, b, driver.ProcSpec{Args: []string{"/bin/cat", "/tmp/f"}, Cwd: "/"}, ""); r.Exit.Code == 0 {
		t.Errorf("a file written in one clone is in another: %q", r.Stdout)
	}
	pid, pst, vmdir := a.st.PID, a.st.StartTime, a.st.Dir
	if err := a.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if initproto.Alive(pid, pst) {
		t.Error("a destroyed clone's QEMU still runs")
	}
	if _, err := os.Stat(vmdir); !os.IsNotExist(err) {
		t.Errorf("a destroyed clone's directory is still there: %v", err)
	}

	// A snapshot QEMU cannot load: dropped, the sandbox boots.
	if err := os.Truncate(snaps[0], 1<<20); err != nil {
		t.Fatal(err)
	}
	c := start("snapbad")
	if c.Restored() {
		t.Error("restored from a truncated snapshot")
	}
	if h := run(c, "/bin/hostname"); h != c.id {
		t.Errorf("hostname in %s = %q", c.id, h)
	}
	d.WaitSnapshots()
	if _, err := os.Stat(snaps[0]); !os.IsNotExist(err) {
		t.Errorf("a snapshot that failed to load was kept (or taken again at once): %v", err)
	}
}
