package container_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/cgroups"
)

// TestCPULimitBeforeFirstProcess: the CPU limit is written when the first
// process starts, not at create (each write walks every CPU cgroup of the
// host), and every process of the sandbox, the first one included, runs under
// it; after an agent restart (Recover) likewise. Nothing of the sandbox is
// created in the state dir.
func TestCPULimitBeforeFirstProcess(t *testing.T) {
	lower := requireImage(t, "busybox")
	cfg := testConfig(t)
	d, err := container.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := driver.Spec{ID: drivertest.NewID("cpu"), Layers: lower, CPU: 0.5, Memory: 64 << 20, Disk: 16 << 20}
	inst, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	cg := inst.(interface{ Cgroup() *cgroups.Group }).Cgroup()
	quota := func() string {
		t.Helper()
		f, want := filepath.Join(cg.CPUDir(), "cpu.cfs_quota_us"), "50000"
		if d.CgroupVersion() == 2 {
			f = filepath.Join(cg.Path(), "cpu.max")
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.TrimSpace(string(b))
		if d.CgroupVersion() == 2 {
			got, _, _ = strings.Cut(got, " ")
		}
		if got != want {
			return got
		}
		return "limited"
	}
	if q := quota(); q == "limited" {
		t.Errorf("an idle sandbox's cgroup already has its CPU quota")
	}
	ents, err := os.ReadDir(cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "dsec-init-") {
			t.Errorf("the sandbox made %s in the state dir", e.Name())
		}
	}
	// The first process reads its own cgroup's quota from the host's view.
	res, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: []string{"/bin/sh", "-c", "echo started"},
		Env: []string{"PATH=" + drivertest.DefaultPath}, Cwd: "/"}, "")
	if err != nil || res.Exit.Code != 0 || res.Stdout != "started\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if q := quota(); q != "limited" {
		t.Errorf("after the first exec the CPU quota is %s, want 0.5 cores", q)
	}

	// A restarted agent re-adopts the sandbox and applies the limit again
	// before its next process (the same value).
	d2, err := container.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	again, err := d2.Recover(ctx, spec, inst.State())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := drivertest.Exec(ctx, again, driver.ProcSpec{Args: []string{"/bin/true"}, Cwd: "/"}, ""); err != nil || res.Exit.Code != 0 {
		t.Fatalf("exec after recover: %+v %v", res, err)
	}
	if q := quota(); q != "limited" {
		t.Errorf("after recover and exec the CPU quota is %s, want 0.5 cores", q)
	}
}
