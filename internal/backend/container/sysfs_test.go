package container_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/container"
)

// mountedOn reports the fs types mounted on dir per /proc/self/mountinfo.
func mountedOn(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[4] != dir {
			continue
		}
		for i := 6; i+1 < len(f); i++ {
			if f[i] == "-" {
				types = append(types, f[i+1])
				break
			}
		}
	}
	return types
}

// TestSharedSysfsLifecycle: a driver mounts one read-only sysfs in its run dir,
// a second driver on the same run dir reuses it, and Close leaves no mount.
func TestSharedSysfsLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	state, err := os.MkdirTemp("/var/lib", "dsec-sysfs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(state)
	run, err := os.MkdirTemp("/run", "dsec-sysfs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(run)
	run, _ = filepath.EvalSymlinks(run)
	sysfs := filepath.Join(run, "sysfs")
	cfg := container.Config{StateDir: state, RunDir: run, CgroupParent: "dsec-test-" + filepath.Base(state)}

	d1, err := container.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := mountedOn(t, sysfs); len(got) != 1 || got[0] != "sysfs" {
		d1.Close()
		t.Fatalf("mounts on %s after New: %v", sysfs, got)
	}
	d2, err := container.New(cfg)
	if err != nil {
		d1.Close()
		t.Fatal(err)
	}
	if got := mountedOn(t, sysfs); len(got) != 1 {
		t.Errorf("second driver stacked a mount: %v", got)
	}
	if err := d2.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := d1.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if got := mountedOn(t, sysfs); len(got) != 0 {
		t.Fatalf("left mounted after Close: %v", got)
	}
	if _, err := os.Stat(sysfs); !os.IsNotExist(err) {
		t.Fatalf("sysfs dir left behind: %v", err)
	}
}
