package cgroups

import (
	"maps"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestFakeV1CPUWeightAndIdleParent: the LS parent's weight lands in
// cpu.shares (v2 scale × 1024 / 100) and reads back; the idle parent gets
// cpu.idle=1, or the smallest cpu.shares on a kernel without cpu.idle.
func TestFakeV1CPUWeightAndIdleParent(t *testing.T) {
	for _, withIdle := range []bool{true, false} {
		root := fakeV1Root(t, false)
		h, err := Detect(root)
		if err != nil {
			t.Fatal(err)
		}
		files := maps.Clone(fakeV1Files())
		files["cpu.shares"] = "1024"
		if withIdle {
			files["cpu.idle"] = "0"
		}
		fakeKernel(t, h, files)
		if _, err := h.Create("dsec/ls-1", Limits{}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Create("dsec/be-1", Limits{Idle: true}); err != nil {
			t.Fatal(err)
		}
		if err := h.SetCPUWeight("dsec", 800); err != nil {
			t.Fatal(err)
		}
		assertFile(t, filepath.Join(root, "cpu", "dsec", "cpu.shares"), "8192")
		if w, err := h.CPUWeight("dsec"); err != nil || w != 800 {
			t.Errorf("CPUWeight: %d %v, want 800", w, err)
		}
		if withIdle {
			assertFile(t, filepath.Join(root, "cpu", "dsec-be", "cpu.idle"), "1")
			assertFile(t, filepath.Join(root, "cpu", "dsec-be", "cpu.shares"), "1024")
		} else {
			assertFile(t, filepath.Join(root, "cpu", "dsec-be", "cpu.shares"), "2")
		}
		for _, bad := range []int{0, -1, 10001} {
			if err := h.SetCPUWeight("dsec", bad); !errdefs.Is(err, api.CodeInvalidArgument) {
				t.Errorf("weight %d: %v, want invalid_argument", bad, err)
			}
		}
	}
}

// TestFakeV2CPUWeight: on v2 the weight is cpu.weight itself.
func TestFakeV2CPUWeight(t *testing.T) {
	root := fakeV2Root(t)
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	files := maps.Clone(fakeV2Files())
	files["cpu.weight"] = "100"
	fakeKernel(t, h, files)
	if _, err := h.Create("dsec/ls-1", Limits{}); err != nil {
		t.Fatal(err)
	}
	if err := h.SetCPUWeight("dsec", 800); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(root, "dsec", "cpu.weight"), "800")
	if w, err := h.CPUWeight("dsec"); err != nil || w != 800 {
		t.Errorf("CPUWeight: %d %v, want 800", w, err)
	}
}
