package microvm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
)

// stateDir is shared by every driver of the test binary (one layer cache,
// one initramfs), removed at the end.
var stateDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "dsec-microvm-test-")
	if err != nil {
		panic(err)
	}
	stateDir = d
	// The KVM probe (once per host boot, up to ProbeTimeout) before any
	// test's own deadline runs.
	if os.Geteuid() == 0 {
		if drv, err := New(Config{StateDir: stateDir}); err == nil {
			drv.Accel(context.Background())
		}
	}
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// needVM skips without root or without the guest kernel (scripts/setup.sh).
func needVM(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("microvm tests need root")
	}
	if _, err := os.Stat(filepath.Join(DefaultVMDir, "vmlinux")); err != nil {
		t.Skip("no guest kernel (run scripts/setup.sh)")
	}
}

func imageLayers(t testing.TB, name string) []driver.Layer {
	dir := filepath.Join("/var/lib/dsec/images", name, "rootfs")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("image %s missing (run scripts/setup.sh)", name)
	}
	return []driver.Layer{{Kind: driver.LayerDir, Path: dir}}
}

func newDriver(t *testing.T) driver.Driver {
	d, err := New(Config{StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConformance(t *testing.T) {
	needVM(t)
	drivertest.Run(t, newDriver, imageLayers(t, "busybox"))
}
