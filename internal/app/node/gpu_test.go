package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestHasGPU: auto advertises a GPU exactly when the dev dir has an NVIDIA
// GPU device node; on and off override it; anything else is refused.
func TestHasGPU(t *testing.T) {
	none, dev := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(none, "nvidiactl"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "nvidia0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode, dir string
		want      bool
	}{{"", none, false}, {GPUAuto, none, false}, {"", dev, true}, {GPUAuto, dev, true}, {GPUOn, none, true}, {GPUOff, dev, false}} {
		if got, err := hasGPU(c.mode, c.dir); err != nil || got != c.want {
			t.Errorf("hasGPU(%q, %s) = %v, %v; want %v", c.mode, filepath.Base(c.dir), got, err, c.want)
		}
	}
	if _, err := hasGPU("yes", dev); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Errorf("hasGPU(yes): %v, want invalid_argument", err)
	}
	// A node with one takes device gpu calls as FnCalls of its engine.
	req := api.FnCallRequest{Device: "gpu"}
	if err := (node{gpu: true}).gpuDevice(&req); err != nil || req.Device != "" {
		t.Errorf("gpu node: %v, device %q", err, req.Device)
	}
}
