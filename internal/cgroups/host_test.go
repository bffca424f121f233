package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/hostfeat"
	"github.com/dsec-dev/dsec/internal/testwait"
	"golang.org/x/sys/unix"
)

// hostHierarchy detects the real /sys/fs/cgroup with a per-test parent and
// removes that parent on cleanup; it skips unless root on a cgroup host.
func hostHierarchy(t testing.TB) *Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	parent := fmt.Sprintf("dsec-test-%d", os.Getpid())
	h, err := Detect("/sys/fs/cgroup", WithParent(parent))
	if err != nil {
		t.Skipf("no usable cgroups: %v", err)
	}
	t.Cleanup(func() { removeParents(t, h) })
	return h
}

// hostV2Hierarchy is the hybrid host's controller-less unified mount, which
// still exercises the v2 freezer, cgroup.kill and CLONE_INTO_CGROUP.
func hostV2Hierarchy(t testing.TB) *Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(root, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			continue
		}
		h, err := detect(root, false)
		if err != nil {
			t.Fatal(err)
		}
		h.parent = fmt.Sprintf("dsec-test-%d", os.Getpid())
		t.Cleanup(func() { removeParents(t, h) })
		return h
	}
	t.Skip("no cgroup2 mount")
	return nil
}

func removeParents(t testing.TB, h *Hierarchy) {
	if err := h.DeleteDevices(""); err != nil {
		t.Errorf("remove test devices cgroups: %v", err)
	}
	for _, m := range h.mountDirs() {
		if err := unix.Rmdir(h.base(m)); err != nil && !errors.Is(err, unix.ENOENT) {
			t.Errorf("remove test parent: %v", err)
		}
	}
}

// createHost creates a group and registers its kill+delete as cleanup.
func createHost(t testing.TB, h *Hierarchy, name string, l Limits) *Group {
	t.Helper()
	g, err := h.Create(name, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Kill(); err != nil {
			t.Errorf("cleanup kill: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Delete(ctx); err != nil {
			t.Errorf("cleanup delete: %v", err)
		}
	})
	return g
}

// startSleep starts `sleep 100` and kills it (by PID) on cleanup.
func startSleep(t testing.TB, attr *syscall.SysProcAttr) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "100")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func TestHostV1LimitsReadBack(t *testing.T) {
	h := hostHierarchy(t)
	hostfeat.Need(t, hostfeat.CgroupV1)
	g := createHost(t, h, "sb-limits", Limits{CPU: 0.5, MemoryBytes: 32 << 20, PidsMax: 50})
	want := map[string]map[string]string{
		ctrlCPU:    {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"},
		ctrlMemory: {"memory.limit_in_bytes": "33554432"},
		ctrlPids:   {"pids.max": "50"},
	}
	if _, err := os.Stat(filepath.Join(g.dir(ctrlMemory), "memory.memsw.limit_in_bytes")); err == nil {
		want[ctrlMemory]["memory.memsw.limit_in_bytes"] = "33554432"
	}
	for ctrl, files := range want {
		for f, v := range files {
			assertFile(t, filepath.Join(g.dir(ctrl), f), v)
		}
	}
	if n, err := readKey(filepath.Join(g.dir(ctrlMemory), "memory.oom_control"), "oom_kill_disable"); err != nil || n != 0 {
		t.Errorf("oom_kill_disable = %d, %v", n, err)
	}
	if names, err := h.List(""); err != nil || !slices.Contains(names, "sb-limits") {
		t.Errorf("List = %v, %v", names, err)
	}
	if _, err := h.Open("sb-limits"); err != nil {
		t.Errorf("Open: %v", err)
	}
}

func TestHostProcsFreezeKillDelete(t *testing.T) {
	h := hostHierarchy(t)
	testProcsFreezeKillDelete(t, h, false)
}

func TestHostV2ProcsFreezeKillDelete(t *testing.T) {
	h := hostV2Hierarchy(t)
	testProcsFreezeKillDelete(t, h, true)
}

func testProcsFreezeKillDelete(t *testing.T, h *Hierarchy, intoCgroup bool) {
	g := createHost(t, h, "sb-procs", Limits{})
	var cmd *exec.Cmd
	if intoCgroup {
		fd, err := g.Dir()
		if err != nil {
			t.Fatal(err)
		}
		cmd = startSleep(t, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd})
		unix.Close(fd)
	} else {
		cmd = startSleep(t, nil)
		if err := g.AddProc(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	pids, err := g.Procs()
	if err != nil || !slices.Equal(pids, []int{cmd.Process.Pid}) {
		t.Fatalf("Procs = %v, %v; want [%d]", pids, err, cmd.Process.Pid)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Version() == 1 {
		assertFile(t, filepath.Join(g.dir(ctrlFreezer), "freezer.state"), "FROZEN")
	}
	if f, err := g.Frozen(); err != nil || !f {
		t.Fatalf("Frozen = %v, %v", f, err)
	}
	if err := g.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := g.Frozen(); err != nil || f {
		t.Fatalf("Frozen after Thaw = %v, %v", f, err)
	}
	if h.Version() == 1 {
		assertFile(t, filepath.Join(g.dir(ctrlFreezer), "freezer.state"), "THAWED")
	}

	// Kill works on a frozen group too.
	if err := g.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("sleep ended with %v, want SIGKILL", err)
	}
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range g.dirs {
		assertGone(t, d)
	}
	if _, err := h.Open("sb-procs"); err == nil {
		t.Error("Open after Delete succeeded")
	}
}

func TestHostOOMKill(t *testing.T) {
	h := hostHierarchy(t)
	g := createHost(t, h, "sb-oom", Limits{MemoryBytes: 32 << 20, PidsMax: 16})
	// The shell waits for a line so it is in the group before it allocates.
	cmd := exec.Command("/bin/sh", "-c", "read x; exec tail /dev/zero")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("memory hog was not killed within 30s")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v, want SIGKILL", err)
	}
	if n, err := g.OOMKills(); err != nil || n == 0 {
		t.Fatalf("OOMKills = %d, %v; want > 0", n, err)
	}
	peak, err := g.MemoryPeak()
	if err != nil || peak <= 0 || peak > 32<<20 {
		t.Errorf("MemoryPeak = %d, %v; want within (0, 32MiB]", peak, err)
	}
	if _, err := g.MemoryUsage(); err != nil {
		t.Error(err)
	}
	if d, err := g.CPUUsage(); err != nil || d <= 0 {
		t.Errorf("CPUUsage = %v, %v", d, err)
	}
}

func TestHostPidsLimit(t *testing.T) {
	h := hostHierarchy(t)
	g := createHost(t, h, "sb-pids", Limits{PidsMax: 3})
	cmd := exec.Command("/bin/sh", "-c", "read x; for i in 1 2 3 4 5 6; do sleep 100 & done; wait")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The shell's complaint about a failed fork is the sign the limit was hit.
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.Kill()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	var b []byte
	refused := testwait.Until(10*time.Second, func() bool {
		b, _ = os.ReadFile(out.Name())
		return strings.Contains(strings.ToLower(string(b)), "fork")
	})
	if !refused {
		pids, _ := g.Procs()
		t.Fatalf("no fork refused within 10 s (processes %v, output %q)", pids, b)
	}
	t.Logf("the shell hit the limit: %s", strings.TrimSpace(string(b)))
	pids, err := g.Procs()
	if err != nil || len(pids) > 3 {
		t.Fatalf("Procs = %v, %v; want at most 3", pids, err)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("shell survived Kill")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestHostConcurrentCreate(t *testing.T) {
	h := hostHierarchy(t)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			g, err := h.Create(fmt.Sprintf("pool/sb-%d", i), Limits{CPU: 1, MemoryBytes: 64 << 20, PidsMax: 32})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = g.Delete(ctx)
				cancel()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if names, err := h.List("pool"); err != nil || len(names) != 0 {
		t.Errorf("leftovers %v, %v", names, err)
	}
	for _, m := range h.mountDirs() {
		if err := unix.Rmdir(filepath.Join(h.base(m), "pool")); err != nil {
			t.Errorf("remove pool: %v", err)
		}
	}
}
