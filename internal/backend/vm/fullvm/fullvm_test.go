package fullvm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestConformance runs the driver suite on leases of the shared VM (see
// leaseDriver): exec, streams, exit codes, credentials, tagged processes,
// signals, files, dial, pause/resume, terminals and re-adoption by a fresh
// driver go to the real guest.
func TestConformance(t *testing.T) {
	shared(t)
	drivertest.Run(t, func(t *testing.T) driver.Driver { return leaseDriver{real: sharedDrv} }, desktopLayers(t))
}

// TestRefusedStartLeavesNothing: a spec the machine cannot boot is
// invalid_argument before anything exists (no VM directory, no QEMU).
func TestRefusedStartLeavesNothing(t *testing.T) {
	needVM(t)
	d := newTestDriver(t)
	busybox := []driver.Layer{{Kind: driver.LayerDir, Path: filepath.Join(DefaultImagesDir, "busybox", "rootfs")}}
	for name, sp := range map[string]driver.Spec{
		"memory below the minimum": {ID: "fvbadmem", Image: DefaultImage, Layers: desktopLayers(t), CPU: 1, Memory: 128 << 20},
		"image without a kernel":   {ID: "fvbadimg", Image: "busybox", Layers: busybox, CPU: 1, Memory: 512 << 20},
		"no layers":                {ID: "fvnolayer", CPU: 1, Memory: 512 << 20},
		"disk above the maximum":   {ID: "fvbigdisk", Image: DefaultImage, Layers: desktopLayers(t), CPU: 1, Memory: 512 << 20, Disk: MaxDisk + 1},
	} {
		inst, err := d.Start(context.Background(), sp)
		if err == nil {
			_ = inst.Destroy(context.Background())
		}
		if !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("%s: Start = %v, want invalid_argument", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
		if _, err := os.Stat(filepath.Join(stateDir, "vms", sp.ID)); !os.IsNotExist(err) {
			t.Errorf("%s: a refused Start left its VM directory (%v)", name, err)
		}
	}
}

// TestZDestroyLeavesNothing runs last: the shared VM is destroyed for real
// and neither QEMU nor its directory (overlay, sockets) is left.
func TestZDestroyLeavesNothing(t *testing.T) {
	inst := shared(t)
	var st struct {
		PID int    `json:"pid"`
		Dir string `json:"dir"`
	}
	if err := json.Unmarshal(inst.State(), &st); err != nil || st.PID == 0 || st.Dir == "" {
		t.Fatalf("state %s: %v", inst.State(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := inst.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	sharedMu.Lock()
	sharedVM = nil
	sharedMu.Unlock()
	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Destroy")
	}
	if err := syscall.Kill(st.PID, 0); err == nil {
		t.Errorf("QEMU (pid %d) still runs after Destroy", st.PID)
	}
	if _, err := os.Stat(st.Dir); !os.IsNotExist(err) {
		t.Errorf("VM directory %s left behind (%v)", st.Dir, err)
	}
}

// TestDesktopNotDrawnFailsCreate: a desktop not drawn within the desktop
// timeout (here 1 ns: never) fails Start with deadline_exceeded naming what
// the screen showed, and the VM is destroyed (no QEMU, no directory).
func TestDesktopNotDrawnFailsCreate(t *testing.T) {
	needVM(t)
	d, err := New(Config{StateDir: stateDir, DesktopTimeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	sp := driver.Spec{ID: "fvnodesk", Image: DefaultImage, Layers: desktopLayers(t), CPU: 1, Memory: 512 << 20}
	if b, err := imageBoot(sp); err != nil || b.Desktop == "" {
		t.Fatalf("the desktop image in %s draws no desktop for Start to wait for (boot.json %+v, %v): rebuild it with scripts/fullvm-image.sh", imagesDir(), b, err)
	}
	inst, err := d.Start(context.Background(), sp)
	if err == nil {
		_ = inst.Destroy(context.Background())
		t.Fatal("Start answered although the desktop could not be drawn within 1 ns")
	}
	if !errdefs.Is(err, api.CodeDeadlineExceeded) || !strings.Contains(err.Error(), "desktop was not drawn") {
		t.Fatalf("Start = %v, want deadline_exceeded saying the desktop was not drawn", err)
	}
	t.Logf("Start: %v", err)
	dir := filepath.Join(stateDir, "vms", sp.ID)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the failed Start left its VM directory %s (%v)", dir, err)
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		if b, err := os.ReadFile(c); err == nil && strings.Contains(string(b), dir) {
			t.Errorf("a process still runs for the failed Start: %s: %q", c, b)
		}
	}
}
