package cgroups

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestDetectV1Separate(t *testing.T) {
	root := fakeV1Root(t, false)
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version() != 1 {
		t.Fatalf("version %d", h.Version())
	}
	if len(h.dirs) != 5 || h.dirs[0] != filepath.Join(root, "memory") {
		t.Fatalf("dirs %v", h.dirs)
	}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		if h.mounts[c] != filepath.Join(root, c) {
			t.Errorf("mount of %s = %q", c, h.mounts[c])
		}
	}
}

func TestDetectV1Combined(t *testing.T) {
	root := fakeV1Root(t, true)
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(filepath.Join(root, "cpu,cpuacct"))
	if h.mounts["cpu"] != real || h.mounts["cpuacct"] != real {
		t.Fatalf("mounts %v", h.mounts)
	}
	if len(h.dirs) != 4 {
		t.Fatalf("dirs %v, want memory, cpu,cpuacct, pids, freezer", h.dirs)
	}
}

func TestDetectV1CombinedNoSymlinks(t *testing.T) {
	root := fakeV1Root(t, true)
	for _, l := range []string{"cpu", "cpuacct"} {
		if err := os.Remove(filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	if h.mounts["cpu"] != filepath.Join(root, "cpu,cpuacct") || h.mounts["cpuacct"] != h.mounts["cpu"] {
		t.Fatalf("mounts %v", h.mounts)
	}
}

func TestDetectV1MissingController(t *testing.T) {
	root := fakeV1Root(t, false)
	if err := os.Remove(filepath.Join(root, "pids", "cgroup.procs")); err != nil {
		t.Fatal(err)
	}
	_, err := Detect(root)
	if !errdefs.Is(err, api.CodeNotImplemented) {
		t.Fatalf("err %v, want not_implemented", err)
	}
}

func TestDetectV1NoCPUAcct(t *testing.T) {
	root := fakeV1Root(t, false)
	if err := os.RemoveAll(filepath.Join(root, "cpuacct")); err != nil {
		t.Fatal(err)
	}
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h, fakeV1Files())
	g, err := h.Create("sb", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.CPUUsage(); !errdefs.Is(err, api.CodeNotImplemented) {
		t.Fatalf("CPUUsage err %v, want not_implemented", err)
	}
}

func TestDetectV2(t *testing.T) {
	h, err := Detect(fakeV2Root(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.Version() != 2 || h.enable != "+cpu +memory +pids" {
		t.Fatalf("version %d enable %q", h.Version(), h.enable)
	}
}

func TestDetectV2WithoutMemoryIsNotV2(t *testing.T) {
	// The hybrid layout's empty unified mount: cgroup2 without controllers.
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"cgroup.controllers": "hugetlb\n", "cgroup.procs": ""})
	if h, err := Detect(root); err == nil {
		t.Fatalf("detected version %d on a controller-less cgroup2 mount", h.Version())
	}
}

func TestDetectMissingRoot(t *testing.T) {
	if _, err := Detect(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("no error for a missing root")
	}
}

func TestNames(t *testing.T) {
	for _, bad := range []string{"", ".", "/abs", "../x", "a/../b", "a//b", "a/", "./a"} {
		if err := checkName(bad); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("checkName(%q) = %v, want invalid_argument", bad, err)
		}
	}
	for _, good := range []string{"a", "dsec/sb-abc", "x.y/z_1"} {
		if err := checkName(good); err != nil {
			t.Errorf("checkName(%q) = %v", good, err)
		}
	}
	if _, err := Detect(fakeV2Root(t), WithParent("../up")); err == nil {
		t.Error("WithParent accepted ../up")
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{{CPU: -1}, {CPU: 0.001}, {MemoryBytes: -1}, {PidsMax: -5}} {
		if err := l.Validate(); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("%+v: %v, want invalid_argument", l, err)
		}
	}
	for _, l := range []Limits{{}, {CPU: 0.01}, {CPU: 2, MemoryBytes: 1 << 30, PidsMax: 10}} {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
}
