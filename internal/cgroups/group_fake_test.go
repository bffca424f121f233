package cgroups

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

func TestFakeV1Lifecycle(t *testing.T) {
	root := fakeV1Root(t, false)
	h, err := Detect(root, WithParent("dsec"))
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h, fakeV1Files())
	g, err := h.Create("sb-1", Limits{CPU: 1.5, MemoryBytes: 64 << 20, PidsMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	dir := func(ctrl string) string { return filepath.Join(root, ctrl, "dsec", "sb-1") }
	assertFile(t, filepath.Join(dir("cpu"), "cpu.cfs_period_us"), "100000")
	assertFile(t, filepath.Join(dir("cpu"), "cpu.cfs_quota_us"), "150000")
	assertFile(t, filepath.Join(dir("memory"), "memory.limit_in_bytes"), "67108864")
	assertFile(t, filepath.Join(dir("memory"), "memory.memsw.limit_in_bytes"), "67108864")
	assertFile(t, filepath.Join(dir("memory"), "memory.oom_control"), "0")
	assertFile(t, filepath.Join(dir("pids"), "pids.max"), "100")
	if g.Path() != dir("memory") || g.Name() != "sb-1" {
		t.Errorf("path %q name %q", g.Path(), g.Name())
	}

	if _, err := h.Create("sb-1", Limits{}); !errdefs.Is(err, api.CodeAlreadyExists) {
		t.Errorf("second create: %v, want already_exists", err)
	}
	if _, err := os.Stat(dir("memory")); err != nil {
		t.Fatalf("failed duplicate create removed the original: %v", err)
	}
	names, err := h.List("")
	if err != nil || !slices.Equal(names, []string{"sb-1"}) {
		t.Errorf("List = %v, %v", names, err)
	}
	if _, err := h.Open("sb-1"); err != nil {
		t.Errorf("Open: %v", err)
	}
	if _, err := h.Open("sb-2"); !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("Open missing: %v, want not_found", err)
	}

	if err := g.AddProc(4242); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		assertFile(t, filepath.Join(dir(c), "cgroup.procs"), "4242")
	}
	writeFiles(t, dir("pids"), map[string]string{"cgroup.procs": "4242\n4243\n"})
	if pids, err := g.Procs(); err != nil || !slices.Equal(pids, []int{4242, 4243}) {
		t.Errorf("Procs = %v, %v", pids, err)
	}
	if fd, err := g.Dir(); fd != -1 || !errdefs.Is(err, api.CodeNotImplemented) {
		t.Errorf("Dir on v1 = %d, %v", fd, err)
	}

	ctx := context.Background()
	if err := g.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir("freezer"), "freezer.state"), "FROZEN")
	if f, err := g.Frozen(); err != nil || !f {
		t.Errorf("Frozen = %v, %v", f, err)
	}
	if err := g.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir("freezer"), "freezer.state"), "THAWED")

	writeFiles(t, dir("memory"), map[string]string{
		"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
		"memory.usage_in_bytes":     "1234\n",
		"memory.max_usage_in_bytes": "5678\n",
	})
	writeFiles(t, dir("cpuacct"), map[string]string{"cpuacct.usage": "1500000000\n"})
	if n, err := g.OOMKills(); err != nil || n != 3 {
		t.Errorf("OOMKills = %d, %v", n, err)
	}
	if n, err := g.MemoryUsage(); err != nil || n != 1234 {
		t.Errorf("MemoryUsage = %d, %v", n, err)
	}
	if n, err := g.MemoryPeak(); err != nil || n != 5678 {
		t.Errorf("MemoryPeak = %d, %v", n, err)
	}
	if d, err := g.CPUUsage(); err != nil || d != 1500*time.Millisecond {
		t.Errorf("CPUUsage = %v, %v", d, err)
	}

	// Fake processes cannot be killed; empty the group and delete it.
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		writeFiles(t, dir(c), map[string]string{"cgroup.procs": ""})
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		assertGone(t, dir(c))
		if _, err := os.Stat(filepath.Join(root, c, "dsec")); err != nil {
			t.Errorf("Delete removed the parent: %v", err)
		}
	}
	if err := g.Delete(ctx); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

func TestFakeV1CombinedAddProcOncePerHierarchy(t *testing.T) {
	root := fakeV1Root(t, true)
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h, fakeV1Files())
	g, err := h.Create("dsec/sb", Limits{CPU: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.dirs) != 4 {
		t.Fatalf("dirs %v", g.dirs)
	}
	assertFile(t, filepath.Join(root, "cpu,cpuacct", "dsec", "sb", "cpu.cfs_quota_us"), "25000")
}

func TestFakeV1OptionalMemsw(t *testing.T) {
	h, err := Detect(fakeV1Root(t, false))
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h, fakeV1Files(), "memory.memsw.limit_in_bytes")
	if _, err := h.Create("sb", Limits{MemoryBytes: 1 << 20}); err != nil {
		t.Fatalf("Create without memsw: %v", err)
	}
}

func TestFakeV1CreateFailureCleansUp(t *testing.T) {
	root := fakeV1Root(t, false)
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h, fakeV1Files(), "pids.max") // the pids.max write fails
	_, err = h.Create("dsec/deep/sb", Limits{PidsMax: 10})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Create: %v, want ENOENT for pids.max", err)
	}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		assertGone(t, filepath.Join(root, c, "dsec"))
	}
	// A pre-existing parent survives a failed create.
	if err := os.Mkdir(filepath.Join(root, "memory", "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Create("keep/sb", Limits{PidsMax: 10}); err == nil {
		t.Fatal("Create succeeded")
	}
	if _, err := os.Stat(filepath.Join(root, "memory", "keep")); err != nil {
		t.Errorf("pre-existing parent removed: %v", err)
	}
	assertGone(t, filepath.Join(root, "memory", "keep", "sb"))
}

func TestFakeV2Lifecycle(t *testing.T) {
	root := fakeV2Root(t)
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h, fakeV2Files(), "memory.peak")
	g, err := h.Create("dsec/sb-1", Limits{CPU: 0.5, MemoryBytes: 32 << 20, PidsMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "dsec", "sb-1")
	assertFile(t, filepath.Join(root, "cgroup.subtree_control"), "+cpu +memory +pids")
	assertFile(t, filepath.Join(root, "dsec", "cgroup.subtree_control"), "+cpu +memory +pids")
	assertFile(t, filepath.Join(dir, "cgroup.subtree_control"), "")
	assertFile(t, filepath.Join(dir, "cpu.max"), "50000 100000")
	assertFile(t, filepath.Join(dir, "memory.max"), "33554432")
	assertFile(t, filepath.Join(dir, "memory.swap.max"), "0")
	assertFile(t, filepath.Join(dir, "pids.max"), "64")

	// The parents' subtree_control is written once, then cached.
	writeFiles(t, filepath.Join(root, "dsec"), map[string]string{"cgroup.subtree_control": "sentinel"})
	g2, err := h.Create("dsec/sb-2", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(root, "dsec", "cgroup.subtree_control"), "sentinel")
	assertFile(t, filepath.Join(root, "dsec", "sb-2", "cpu.max"), "max 100000")
	if names, err := h.List("dsec"); err != nil || !slices.Equal(names, []string{"dsec/sb-1", "dsec/sb-2"}) {
		t.Errorf("List = %v, %v", names, err)
	}

	fd, err := g.Dir()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("Dir fd is not a directory: %v", err)
	}
	unix.Close(fd)

	if err := g.AddProc(77); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir, "cgroup.procs"), "77")

	// The fake kernel never reports frozen: Freeze times out and reverts.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Freeze(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Freeze = %v, want deadline exceeded", err)
	}
	assertFile(t, filepath.Join(dir, "cgroup.freeze"), "0")
	writeFiles(t, dir, map[string]string{"cgroup.events": "populated 1\nfrozen 1\n"})
	if err := g.Freeze(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir, "cgroup.freeze"), "1")
	if f, err := g.Frozen(); err != nil || !f {
		t.Errorf("Frozen = %v, %v", f, err)
	}
	writeFiles(t, dir, map[string]string{"cgroup.events": "populated 1\nfrozen 0\n"})
	if err := g.Thaw(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir, "cgroup.freeze"), "0")

	writeFiles(t, dir, map[string]string{
		"memory.events":  "low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 0\n",
		"memory.current": "4096\n",
		"cpu.stat":       "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
	})
	if n, err := g.OOMKills(); err != nil || n != 2 {
		t.Errorf("OOMKills = %d, %v", n, err)
	}
	if n, err := g.MemoryUsage(); err != nil || n != 4096 {
		t.Errorf("MemoryUsage = %d, %v", n, err)
	}
	if _, err := g.MemoryPeak(); !errdefs.Is(err, api.CodeNotImplemented) {
		t.Errorf("MemoryPeak without memory.peak: %v, want not_implemented", err)
	}
	if d, err := g.CPUUsage(); err != nil || d != 2500*time.Microsecond {
		t.Errorf("CPUUsage = %v, %v", d, err)
	}

	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir, "cgroup.kill"), "1")
	for _, gr := range []*Group{g, g2} {
		if err := gr.Delete(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	assertGone(t, dir)
}

func TestFakeV2NoAvailableControllers(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"cgroup.controllers": "hugetlb", "cgroup.subtree_control": "untouched"})
	h, err := detect(root, false)
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h, fakeV2Files())
	if _, err := h.Create("a/b", Limits{}); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(root, "cgroup.subtree_control"), "untouched")
}

func TestDeleteBusyHonoursContext(t *testing.T) {
	root := fakeV2Root(t)
	h, err := Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h, fakeV2Files())
	g, err := h.Create("sb", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	h.rmdir = func(string) error { return unix.EBUSY }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := g.Delete(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Delete = %v, want deadline exceeded", err)
	}
}

// TestFakeSetCPU: a group made without a CPU limit gets it later, in the cpu
// directory it has then (v1: under the idle parent once best-effort).
func TestFakeSetCPU(t *testing.T) {
	root := fakeV1Root(t, false)
	h, err := Detect(root, WithParent("dsec"))
	if err != nil {
		t.Fatal(err)
	}
	files := maps.Clone(fakeV1Files())
	files["cpu.shares"], files["cpu.idle"] = "1024", "0"
	fakeKernel(t, h, files)
	g, err := h.Create("sb-cpu", Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	quota := func() string { return filepath.Join(g.CPUDir(), "cpu.cfs_quota_us") }
	assertFile(t, quota(), "-1")
	if err := g.SetCPU(0.5); err != nil {
		t.Fatal(err)
	}
	assertFile(t, quota(), "50000")
	if err := g.SetIdle(true); err != nil {
		t.Fatal(err)
	}
	if err := g.SetCPU(2); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "cpu", "dsec-"+IdleParent, "sb-cpu"); g.CPUDir() != want {
		t.Fatalf("cpu dir %s, want %s (under the idle parent)", g.CPUDir(), want)
	}
	assertFile(t, quota(), "200000")
	if err := g.SetCPU(-1); err == nil {
		t.Error("SetCPU(-1) succeeded")
	}

	root2 := fakeV2Root(t)
	h2, err := Detect(root2)
	if err != nil {
		t.Fatal(err)
	}
	fakeKernel(t, h2, fakeV2Files(), "memory.peak")
	g2, err := h2.Create("dsec/sb-cpu", Limits{PidsMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	max := filepath.Join(root2, "dsec", "sb-cpu", "cpu.max")
	assertFile(t, max, "max 100000")
	if err := g2.SetCPU(0.25); err != nil {
		t.Fatal(err)
	}
	assertFile(t, max, "25000 100000")
	if err := g2.SetCPU(0); err != nil {
		t.Fatal(err)
	}
	assertFile(t, max, "max 100000")
}
