package hostfeat

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestGPUDevices: per-GPU NVIDIA device nodes count, the driver's control
// nodes and other devices do not; a missing directory has none.
func TestGPUDevices(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm", "null", "nvidia12x"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := GPUDevices(dir)
	if err != nil || !slices.Equal(got, []string{"nvidia0", "nvidia1"}) {
		t.Fatalf("GPUDevices = %q, %v; want [nvidia0 nvidia1]", got, err)
	}
	if got, err := GPUDevices(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Fatalf("missing dir: %q, %v; want none", got, err)
	}
	empty := t.TempDir()
	if got, err := GPUDevices(empty); err != nil || len(got) != 0 {
		t.Fatalf("no GPU: %q, %v", got, err)
	}
}
