package initproto

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/testwait"
)

// templateSpawner starts one spawner helper of a freshly installed init, in
// its template namespace (closed with the test), and returns it and the init.
func templateSpawner(t *testing.T) (*Spawner, string) {
	t.Helper()
	path := installInit(t)
	sp, err := StartSpawner(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	if !sp.Template(path) {
		t.Fatal("the spawner has no template namespace on this kernel")
	}
	return sp, path
}

// ppid reads pid's parent from /proc.
func ppid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSpawnerInit: an init cloned by the spawner works like a forked one and
// is this process's child (CLONE_PARENT): it reaps it and gets its SIGCHLD.
func TestSpawnerInit(t *testing.T) {
	requireRoot(t)
	sp, err := StartSpawner(installInit(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	s := newSandbox(t, func(c *SpawnConfig) { c.Spawner = sp })
	if got := ppid(t, s.init.PID); got != os.Getpid() {
		t.Fatalf("the init's parent is %d, want this process %d", got, os.Getpid())
	}
	if r := s.sh(t, "hostname"); strings.TrimSpace(r.stdout) != "sbx-test" {
		t.Fatalf("hostname in the sandbox: %+v", r)
	}
	s.kill() // wait4 on the pid: fails with ECHILD unless it is our child
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(s.init.PID, &ws, syscall.WNOHANG, nil); !errors.Is(err, syscall.ECHILD) {
		t.Fatalf("init %d not reaped by us: %v", s.init.PID, err)
	}
}

// TestSpawnerExecError: a template helper runs only its own binary: a spawn
// of any other path starts nothing and is handed to ForkExec.
func TestSpawnerExecError(t *testing.T) {
	requireRoot(t)
	sp, err := StartSpawner(installInit(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if !sp.Template(sp.path) {
		t.Fatal("the helper did not set up its template namespace")
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if _, _, err = sp.spawn("/nonexistent/dsec-init", 0, []uintptr{null.Fd(), null.Fd(), null.Fd()}, -1, true); !errors.Is(err, errSpawnerGone) {
		t.Fatalf("want errSpawnerGone from a template helper, got %v", err)
	}
}

// TestSpawnerExecErrorOnStatusPipe: the helper answers right after the
// clone; a child that cannot exec (here a helper without the template, which
// execs the request's path) writes the error on its status pipe (fd 5),
// where the handshake reads the init's setup outcome, and exits 127.
func TestSpawnerExecErrorOnStatusPipe(t *testing.T) {
	requireRoot(t)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	peer := os.NewFile(uintptr(pair[1]), "spawner-peer")
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	// no template directory: the helper sends no mode byte and execs paths
	pid, err := syscall.ForkExec(installInit(t), []string{"dsec-init", "spawner"}, &syscall.ProcAttr{
		Env: []string{}, Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), peer.Fd()},
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	peer.Close()
	if err != nil {
		unix.Close(pair[0])
		t.Fatal(err)
	}
	h := &helper{conn: os.NewFile(uintptr(pair[0]), "spawner"), pid: pid}
	sp := &Spawner{free: make(chan *helper, 1), path: "/nonexistent/dsec-init", all: []*helper{h}}
	sp.free <- h
	defer sp.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	child, _, err := sp.spawn("/nonexistent/dsec-init", 0,
		[]uintptr{null.Fd(), null.Fd(), null.Fd(), null.Fd(), null.Fd(), w.Fd()}, -1, false)
	w.Close()
	if err != nil {
		t.Fatalf("spawn: %v (an exec error is the child's to report, not the answer's)", err)
	}
	line, _ := io.ReadAll(r)
	if want := "ERR spawn: exec /nonexistent/dsec-init: No such file or directory\n"; string(line) != want {
		t.Errorf("status pipe: %q, want %q", line, want)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(child, &ws, 0, nil); err != nil || ws.ExitStatus() != 127 {
		t.Errorf("child %d: %v, exit %d, want 127", child, err, ws.ExitStatus())
	}
}

// TestSpawnerWedgedFallsBack: a helper that never answers (here a program that
// is not dsec-init's spawner at all, as a stale binary would be) is given up
// after the answer timeout and the init is started by ForkExec instead: the
// create works, late, rather than hanging.
func TestSpawnerWedgedFallsBack(t *testing.T) {
	requireRoot(t)
	script := t.TempDir() + "/not-a-spawner"
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sp, err := startSpawner(script, 1, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	t0 := time.Now()
	s := newSandbox(t, func(c *SpawnConfig) { c.Spawner = sp })
	if r := s.sh(t, "hostname"); strings.TrimSpace(r.stdout) != "sbx-test" {
		t.Fatalf("hostname in the sandbox: %+v", r)
	}
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("the create took %v with a wedged spawner", d)
	}
	s.kill()
}

// TestSpawnerTemplate: a spawner's helper lives in a mount namespace holding
// one mount, its empty read-only template tmpfs, and nothing of the host; an
// init it clones copies that namespace, gets its layers as fds and runs
// with the overlay as its root: its mount table names no host path.
func TestSpawnerTemplate(t *testing.T) {
	requireRoot(t)
	sp, path := templateSpawner(t)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", sp.all[0].pid))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], " / / ro,") || !strings.Contains(lines[0], " - tmpfs dsec-template ") {
		t.Fatalf("the spawner's mount namespace holds more than its read-only template:\n%s", b)
	}
	var lower string
	s := newSandbox(t, func(c *SpawnConfig) { c.Spawner = sp; c.InitPath = path; lower = c.Lower[0] })
	if r := s.sh(t, "hostname"); strings.TrimSpace(r.stdout) != "sbx-test" {
		t.Fatalf("hostname in the sandbox: %+v", r)
	}
	r := s.sh(t, "cat /proc/self/mountinfo")
	if !strings.Contains(r.stdout, "lowerdir=/rw/.lower/0") || strings.Contains(r.stdout, lower) {
		t.Fatalf("the sandbox's overlay is not on the layers handed over as fds (lower %s):\n%s", lower, r.stdout)
	}
	if r := s.sh(t, "ls /sys/class/net"); !strings.Contains(r.stdout, "lo") {
		t.Fatalf("the shared sysfs is not the sandbox's /sys: %+v", r)
	}
	s.kill()
}

// netnsFDs lists the network namespaces pid holds open (readlink of its fds).
func netnsFDs(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "net:[") {
			got[l] = true
		}
	}
	return got
}

// TestSpawnerNetnsPool: a helper makes network namespaces while idle and
// clones each init into one of them instead of making one in the clone; each
// sandbox gets its own, never the host's, and the pool fills up again.
func TestSpawnerNetnsPool(t *testing.T) {
	requireRoot(t)
	sp, path := templateSpawner(t)
	helper := sp.all[0].pid
	// the helper's own namespace (it holds an fd of it too)
	host, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", helper))
	if err != nil {
		t.Fatal(err)
	}
	full := func() map[string]bool {
		t.Helper()
		var pool map[string]bool
		if !testwait.Until(10*time.Second, func() bool { pool = netnsFDs(t, helper); return pool[host] && len(pool) == 5 }) {
			t.Fatalf("the helper holds network namespaces %v, want its own (%s) and 4 more", pool, host)
		}
		delete(pool, host)
		return pool
	}
	seen := map[string]bool{host: true}
	for i := range 2 {
		pool := full()
		s := newSandbox(t, func(c *SpawnConfig) { c.Spawner = sp; c.InitPath = path })
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", s.init.PID))
		if err != nil {
			t.Fatal(err)
		}
		if !pool[ns] || seen[ns] {
			t.Fatalf("sandbox %d: network namespace %s, want one of the helper's pool %v and not the host's or an earlier sandbox's %v", i, ns, pool, seen)
		}
		seen[ns] = true
		if r := s.sh(t, "cat /proc/net/dev"); !strings.Contains(r.stdout, "lo:") {
			t.Fatalf("sandbox %d: /proc/net/dev %+v", i, r)
		}
		s.kill()
	}
	full()
}
