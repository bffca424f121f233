package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/seccomp"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// busyboxRootfs builds a tiny rootfs from the host's static busybox.
func busyboxRootfs(t *testing.T, applets ...string) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed")
	}
	if out, err := exec.Command("ldd", bb).CombinedOutput(); err == nil && !strings.Contains(string(out), "not a dynamic") {
		t.Skipf("%s is not static (install busybox-static)", bb)
	}
	dir := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range applets {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func findOrSkip(t *testing.T, name string) Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	r, err := Find(name)
	if err != nil {
		t.Skip(err)
	}
	return r
}

// processesIn returns the PIDs whose root directory is rootfs.
func processesIn(t *testing.T, rootfs string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		root, err := os.Readlink(filepath.Join("/proc", e.Name(), "root"))
		if err == nil && root == rootfs {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func TestBench(t *testing.T) {
	for _, name := range Known {
		t.Run(name, func(t *testing.T) {
			r := findOrSkip(t, name)
			rootfs := busyboxRootfs(t, "sh", "sleep")
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := r.Bench(ctx, rootfs, 5, 2)
			if err != nil {
				t.Fatalf("Bench: %v", err)
			}
			t.Logf("%s: %+v", name, res)
			if res.N != 5 {
				t.Errorf("N = %d, want 5", res.N)
			}
			if res.PerSecond <= 0 || res.P50ms <= 0 || res.P99ms < res.P50ms || res.TeardownSeconds <= 0 {
				t.Errorf("implausible result %+v", res)
			}
			if res.Note == "" {
				t.Error("empty Note")
			}
			assertClean(t, r, rootfs, tmp)
		})
	}
}

// A rootfs without sleep: creation fails, and nothing is left behind.
func TestBenchErrorCleansUp(t *testing.T) {
	for _, name := range Known {
		t.Run(name, func(t *testing.T) {
			r := findOrSkip(t, name)
			rootfs := busyboxRootfs(t, "sh") // no sleep
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := r.Bench(ctx, rootfs, 4, 2)
			if err == nil {
				t.Fatal("Bench on a rootfs without sleep succeeded")
			}
			t.Logf("expected error: %v", err)
			assertClean(t, r, rootfs, tmp)
		})
	}
}

func TestBenchCanceled(t *testing.T) {
	r := findOrSkip(t, "crun")
	rootfs := busyboxRootfs(t, "sh", "sleep")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := r.Bench(ctx, rootfs, 1000, 2)
	if err == nil {
		t.Fatal("Bench of 1000 containers finished within 150ms?")
	}
	assertClean(t, r, rootfs, tmp)
}

// assertClean checks that Bench removed its state (TMPDIR is empty) and that
// no process is left running in rootfs.
func assertClean(t *testing.T, r Runtime, rootfs, tmp string) {
	t.Helper()
	ents, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		// If the state dir survived, say what the runtime still lists.
		st := filepath.Join(tmp, e.Name(), "state")
		ids, _ := List(context.Background(), r, st)
		t.Errorf("left behind in TMPDIR: %s (containers listed: %v)", e.Name(), ids)
	}
	// No cgroups of this process's runs (runc creates one per container).
	cgs, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/dsec-peer-%s-%d-*", r.Name, os.Getpid()))
	if len(cgs) > 0 {
		t.Errorf("cgroups left behind: %v", cgs)
	}
	// Killed inits may take a moment to be reaped.
	var pids []string
	if !testwait.Until(5*time.Second, func() bool { pids = processesIn(t, rootfs); return len(pids) == 0 }) {
		t.Errorf("processes still running in %s: %v", rootfs, pids)
	}
}

func TestFind(t *testing.T) {
	if _, err := Find("nosuchruntime"); err == nil {
		t.Error("Find(nosuchruntime) succeeded")
	}
	t.Setenv("PATH", t.TempDir())
	_, err := Find("crun")
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Find(crun) with empty PATH: %v", err)
	}
}

func TestSpecJSON(t *testing.T) {
	b, err := json.Marshal(Spec("/r", "h"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	root := m["root"].(map[string]any)
	if root["path"] != "/r" || root["readonly"] != true {
		t.Errorf("root = %v", root)
	}
	ns := m["linux"].(map[string]any)["namespaces"].([]any)
	if len(ns) != 5 {
		t.Errorf("namespaces = %v", ns)
	}
}

// TestBenchReport prints peer numbers on the installed images. Opt-in:
//
//	DSEC_PEER_BENCH=1 go test -run TestBenchReport -v ./internal/bench/peer/
//
// DSEC_PEER_N and DSEC_PEER_PARALLEL override N=20 and parallel=2.
func TestBenchReport(t *testing.T) {
	if os.Getenv("DSEC_PEER_BENCH") == "" {
		t.Skip("set DSEC_PEER_BENCH=1 to run")
	}
	n, par := 20, 2
	if v := os.Getenv("DSEC_PEER_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	if v := os.Getenv("DSEC_PEER_PARALLEL"); v != "" {
		fmt.Sscan(v, &par)
	}
	images := os.Getenv("DSEC_IMAGES_DIR")
	if images == "" {
		images = "/var/lib/dsec/images"
	}
	for _, img := range []string{"busybox", "debian"} {
		rootfs := filepath.Join(images, img, "rootfs")
		if _, err := os.Stat(rootfs); err != nil {
			t.Logf("skip image %s: %v", img, err)
			continue
		}
		for _, name := range Known {
			r := findOrSkip(t, name)
			res, err := r.Bench(context.Background(), rootfs, n, par)
			if err != nil {
				t.Errorf("%s on %s: %v", name, img, err)
				continue
			}
			t.Logf("%-5s %-7s N=%d par=%d  %.1f creates/s  p50 %.1fms  p99 %.1fms  teardown %.2fs",
				name, img, res.N, par, res.PerSecond, res.P50ms, res.P99ms, res.TeardownSeconds)
		}
	}
}

// TestSeccompNames: every syscall of dsec's profile translates, the
// translation keeps each rule's action and the default refusal, and the
// argument conditions come out in the runtime spec's form (socket's as
// Docker writes them).
func TestSeccompNames(t *testing.T) {
	p := seccomp.Default()
	out, notes, err := SeccompFrom(p)
	if err != nil {
		t.Fatal(err)
	}
	if out.DefaultAction != "SCMP_ACT_ERRNO" || out.DefaultErrnoRet == nil || *out.DefaultErrnoRet != uint(unix.EPERM) {
		t.Errorf("default %s/%v, want SCMP_ACT_ERRNO EPERM", out.DefaultAction, out.DefaultErrnoRet)
	}
	want := map[string]bool{}
	for _, r := range p.Rules {
		for _, nr := range r.Syscalls {
			name, ok := seccomp.SyscallName(nr)
			if !ok {
				t.Fatalf("syscall %d has no name", nr)
			}
			want[name] = true
		}
	}
	names := map[string]bool{}
	args := map[string][]string{}
	for _, r := range out.Syscalls {
		for _, s := range r.Names {
			names[s] = true
			for _, a := range r.Args {
				args[s] = append(args[s], fmt.Sprintf("%s:%s %#x/%#x", r.Action, a.Op, a.Value, a.ValueTwo))
			}
		}
		if r.Action == "SCMP_ACT_ERRNO" && (r.ErrnoRet == nil || *r.ErrnoRet == 0) {
			t.Errorf("rule %v: errno action without an errno", r.Names)
		}
	}
	if len(names) != len(want) || len(want) < 290 {
		t.Errorf("%d syscall names in the OCI profile, %d syscalls in dsec's", len(names), len(want))
	}
	for name := range want {
		if !names[name] {
			t.Errorf("%s missing from the OCI profile", name)
		}
	}
	if len(notes) != 0 {
		t.Errorf("notes %v, want none", notes)
	}
	for name, w := range map[string][]string{
		"socket": {"SCMP_ACT_ALLOW:SCMP_CMP_LT 0x26/0x0", "SCMP_ACT_ALLOW:SCMP_CMP_EQ 0x27/0x0", "SCMP_ACT_ALLOW:SCMP_CMP_GT 0x28/0x0"},
		"clone":  {"SCMP_ACT_ALLOW:SCMP_CMP_MASKED_EQ 0x7e020080/0x0"},
		"personality": {"SCMP_ACT_ALLOW:SCMP_CMP_EQ 0x0/0x0", "SCMP_ACT_ALLOW:SCMP_CMP_EQ 0x8/0x0", "SCMP_ACT_ALLOW:SCMP_CMP_EQ 0x20000/0x0",
			"SCMP_ACT_ALLOW:SCMP_CMP_EQ 0x20008/0x0", "SCMP_ACT_ALLOW:SCMP_CMP_EQ 0xffffffff/0x0"},
	} {
		if !slices.Equal(args[name], w) {
			t.Errorf("%s: %v, want %v", name, args[name], w)
		}
	}
}
