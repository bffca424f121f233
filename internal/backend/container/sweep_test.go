package container_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/cgroups"
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSweep checks what a restarted agent relies on: Sweep releases the sandboxes
// nobody recorded (a create that crashed half-way) and leaves the kept ones alone.
func TestSweep(t *testing.T) {
	lower := requireImage(t, "busybox")
	cfg := testConfig(t)
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	d, err := container.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := func() driver.Spec {
		return driver.Spec{ID: drivertest.NewID("sw"), Layers: lower, Memory: 64 << 20, Disk: 16 << 20, PidsMax: 64}
	}
	keptSpec, lostSpec := spec(), spec()
	kept, err := d.Start(ctx, keptSpec)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Destroy(context.Background())
	lost, err := d.Start(ctx, lostSpec)
	if err != nil {
		t.Fatal(err)
	}
	defer lost.Destroy(context.Background())

	d.Sweep(ctx, map[string]bool{keptSpec.ID: true})

	select {
	case <-lost.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the unrecorded sandbox still runs after Sweep")
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, lostSpec.ID)); !os.IsNotExist(err) {
		t.Errorf("the unrecorded sandbox's dir survived Sweep: %v", err)
	}
	if h, err := cgroups.Detect("/sys/fs/cgroup"); err != nil {
		t.Error(err)
	} else if _, err := h.Open(cfg.CgroupParent + "/" + lostSpec.ID); err == nil {
		t.Errorf("the unrecorded sandbox's cgroup survived Sweep")
	}
	select {
	case <-kept.Done():
		t.Fatal("Sweep killed a kept sandbox")
	default:
	}
	if r, err := drivertest.Exec(ctx, kept, driver.ProcSpec{Args: []string{"echo", "ok"}, Env: []string{"PATH=/bin"}, Cwd: "/"}, ""); err != nil || r.Stdout != "ok\n" {
		t.Errorf("kept sandbox after Sweep: %+v, %v", r, err)
	}
	if !strings.Contains(logs.String(), "id="+lostSpec.ID) {
		t.Errorf("Sweep did not log the release of %s:\n%s", lostSpec.ID, logs.String())
	}
	t.Run("OnlyLeftoversReleased", func(t *testing.T) {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "releasing unrecorded sandbox") && !strings.Contains(line, "id="+lostSpec.ID) {
				t.Errorf("Sweep released something besides %s: %s", lostSpec.ID, line)
			}
		}
	})
}

// TestSweepCgroupOnlyLeftover: a cgroup whose sandbox dir is already gone (a
// release interrupted between the two) is released by Sweep too.
func TestSweepCgroupOnlyLeftover(t *testing.T) {
	requireImage(t, "busybox")
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&syncBuffer{}, nil))
	d, err := container.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h, err := cgroups.Detect("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	ghost := cfg.CgroupParent + "/" + drivertest.NewID("gh")
	g, err := h.Create(ghost, cgroups.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer g.Delete(ctx)

	d.Sweep(ctx, map[string]bool{})
	if _, err := h.Open(ghost); err == nil {
		t.Errorf("Sweep left the leftover cgroup %s", ghost)
	}
}

// TestSweepRunDirOnlyLeftover: a create cut off after it made its mountpoint
// directory and socket in the run dir but before its state dir and cgroup (a
// kill -9 of the server at that point) leaves only those; Sweep removes them,
// so the run dir empties and its tmpfs can go when the driver closes.
func TestSweepRunDirOnlyLeftover(t *testing.T) {
	requireImage(t, "busybox")
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&syncBuffer{}, nil))
	d, err := container.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	id := drivertest.NewID("rd")
	mnt := filepath.Join(cfg.RunDir, id+".d")
	if err := os.MkdirAll(filepath.Join(mnt, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(cfg.RunDir, id+".sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d.Sweep(ctx, map[string]bool{})
	for _, p := range []string{mnt, sock} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("Sweep left %s (%v)", p, err)
		}
	}
	// The run dir's own entries are not sandboxes.
	if ents, err := os.ReadDir(cfg.RunDir); err == nil {
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".d") || strings.HasSuffix(e.Name(), ".sock") {
				t.Errorf("run dir still holds %s", e.Name())
			}
		}
	}
}
