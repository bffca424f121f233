package fncall

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// smallEngine is an engine of its own with one zygote of nslots slots (so a
// test controls which slot a run gets), closed when the test ends.
func smallEngine(t *testing.T, nslots int) (*Engine, *pool) {
	t.Helper()
	testEngine(t) // skips without root or the judge image
	e, err := New(Config{Images: &image.Store{Dir: imagesDir()}, StateDir: t.TempDir(),
		Zygotes: 1, SlotsPerZygote: nslots, UIDBase: 2100000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	p, err := e.pool("")
	if err != nil {
		t.Fatal(err)
	}
	return e, p
}

func quickSpec(args ...string) Spec {
	return Spec{Args: args, Limits: Limits{Memory: 64 << 20, Procs: 8, Output: 1 << 10, Stderr: 1 << 10, Wall: 30 * time.Second}}
}

// bounded runs f, failing the test if it has not returned after 30 s (a
// run that hangs is the failure these tests look for).
func bounded(t *testing.T, what string, f func() (Result, error)) (Result, error) {
	t.Helper()
	type ret struct {
		r   Result
		err error
	}
	ch := make(chan ret, 1)
	go func() {
		r, err := f()
		ch <- ret{r, err}
	}()
	select {
	case v := <-ch:
		return v.r, v.err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not end", what)
		return Result{}, nil
	}
}

// helpers lists the zygote's children (its slots' helpers, ended or not) as
// pid → the system call each is blocked in (-1: running, or not known).
func helpers(t *testing.T, p *pool) map[int]int {
	t.Helper()
	zpid := p.zs[0].z.cmd.Process.Pid
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(zpid) {
			continue
		}
		out[pid] = -1
		if sc, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid)); err == nil {
			if n, err := strconv.Atoi(strings.Fields(string(sc) + " x")[0]); err == nil {
				out[pid] = n
			}
		}
	}
	return out
}

// zygoteMounts counts the mounts in the zygote's mount namespace.
func zygoteMounts(t *testing.T, p *pool) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", p.zs[0].z.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// assertIdle checks what WaitIdle promises: every slot is back in the pool
// and each slot's helper is prepared, i.e. waiting for its request in
// recvmsg; and no other helper is left.
func assertIdle(t *testing.T, e *Engine, p *pool, nslots int) {
	t.Helper()
	if _, err := bounded(t, "WaitIdle", func() (Result, error) { return Result{}, e.WaitIdle(context.Background()) }); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	if n := len(p.free); n != nslots {
		t.Errorf("%d of %d slots free after WaitIdle", n, nslots)
	}
	hs := helpers(t, p)
	if len(hs) != nslots {
		t.Errorf("%d helpers after WaitIdle, want one per slot (%d): %v", len(hs), nslots, hs)
	}
	for pid, sc := range hs {
		if sc != unix.SYS_RECVMSG {
			t.Errorf("helper %d is in system call %d after WaitIdle, want recvmsg (%d): still setting up", pid, sc, unix.SYS_RECVMSG)
		}
	}
}

// TestWaitIdle: after a burst of runs with other sandbox parameters than the
// slots had (each slot's helper replaced, then the next one prepared after
// each run), WaitIdle returns only once every slot's next sandbox is ready.
func TestWaitIdle(t *testing.T) {
	const nslots = 8
	e, p := smallEngine(t, nslots)
	for round := range 3 {
		var wg sync.WaitGroup
		for range nslots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spec := quickSpec("/bin/true")
				spec.NoProc = round%2 == 1
				if r, err := e.Run(context.Background(), spec); err != nil || !r.Exited || r.ExitCode != 0 {
					t.Errorf("run: %+v, %v", r, err)
				}
			}()
		}
		wg.Wait()
		assertIdle(t, e, p, nslots)
	}
}

// TestRunCanceledWhileQueued: a run whose context ends while it waits for a
// slot returns the context's error without running, and the run holding the
// slot is not disturbed; a run canceled while its request waits at the
// zygote for the slot's helper (still setting up) ends as "canceled" and
// never starts. The slot serves the next run, and no helper or mount is left.
func TestRunCanceledWhileQueued(t *testing.T) {
	e, p := smallEngine(t, 1)
	mounts := func() int { assertIdle(t, e, p, 1); return zygoteMounts(t, p) }
	if r, err := e.Run(context.Background(), quickSpec("/bin/true")); err != nil || r.ExitCode != 0 {
		t.Fatalf("first run: %+v, %v", r, err)
	}
	base := mounts()

	// 1. Queued in the engine: the only slot runs `sleep 60`.
	holdCtx, stopHold := context.WithCancel(context.Background())
	held := make(chan Result, 1)
	go func() {
		r, _ := e.Run(holdCtx, quickSpec("/bin/sleep", "60"))
		held <- r
	}()
	testwait.For(t, 30*time.Second, "the only slot taken by the holding run", func() bool { return len(p.free) == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := bounded(t, "queued run", func() (Result, error) { return e.Run(ctx, quickSpec("/bin/echo", "queued ran")) })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("run queued for a slot past its deadline: %v, want %v", err, context.DeadlineExceeded)
	}
	select {
	case r := <-held:
		t.Fatalf("the run holding the slot ended early: %+v", r)
	default:
	}
	stopHold()
	if r, _ := bounded(t, "canceled sleep", func() (Result, error) { return <-held, nil }); r.Killed != "canceled" {
		t.Errorf("canceled sleep: %+v", r)
	}

	// 2. Queued at the zygote: other sandbox parameters than the slot's
	// helper has make the zygote replace it right before the request is
	// sent, so the request waits in the slot's socket while the new helper
	// sets up; the context is already done.
	s := <-p.free
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	spec := quickSpec("/bin/sh", "-c", "echo ran; sleep 60")
	spec.NoProc = true
	r, err := bounded(t, "run canceled at the zygote", func() (Result, error) { return e.runOn(ctx, p, s, spec) })
	if r.Killed != "canceled" || r.Exited || len(r.Stdout) != 0 {
		t.Errorf("run canceled before its helper took it: %+v (stdout %q), %v", r, r.Stdout, err)
	}

	// The slot serves the next runs (either sandbox parameters).
	for _, noProc := range []bool{true, false} {
		spec := quickSpec("/bin/echo", "after")
		spec.NoProc = noProc
		if r, err := e.Run(context.Background(), spec); err != nil || string(r.Stdout) != "after\n" {
			t.Errorf("run after the cancellations: %+v, %v", r, err)
		}
	}
	if n := mounts(); n != base {
		t.Errorf("zygote mounts %d, were %d", n, base)
	}
}

// TestRunCanceledBeforeSend: a run whose context ended before its request
// went out never starts, also when its slot's helper is prepared and waits
// for the request (real-time: it takes a request the moment it arrives,
// ahead of the zygote handling a kill sent after it). The slot serves the
// next run.
func TestRunCanceledBeforeSend(t *testing.T) {
	e, p := smallEngine(t, 1)
	if r, err := e.Run(context.Background(), quickSpec("/bin/true")); err != nil || r.ExitCode != 0 {
		t.Fatalf("first run: %+v, %v", r, err)
	}
	spec := quickSpec("/bin/sh", "-c", "echo ran") // the first run's sandbox parameters
	for i := range 20 {
		assertIdle(t, e, p, 1) // the slot's helper waits in recvmsg
		s := <-p.free
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r, err := bounded(t, "canceled run", func() (Result, error) { return e.runOn(ctx, p, s, spec) })
		if r.Killed != "canceled" || r.Exited || len(r.Stdout) != 0 || err != nil {
			t.Fatalf("try %d: run canceled before it was sent: %+v (stdout %q), %v; want killed \"canceled\", never started", i, r, r.Stdout, err)
		}
	}
	if r, err := e.Run(context.Background(), quickSpec("/bin/echo", "after")); err != nil || string(r.Stdout) != "after\n" {
		t.Errorf("run after the cancellations: %+v, %v", r, err)
	}
}

// TestHelperSetupFailure: when a slot's helper cannot set up its sandbox (here:
// the slot's uid is one no tmpfs or fs uid accepts), the run waiting for it
// gets an infrastructure error naming the failed step; the slot recovers for
// the next run, and no helper or mount is left behind.
func TestHelperSetupFailure(t *testing.T) {
	e, p := smallEngine(t, 1)
	if r, err := e.Run(context.Background(), quickSpec("/bin/true")); err != nil || r.ExitCode != 0 {
		t.Fatalf("first run: %+v, %v", r, err)
	}
	assertIdle(t, e, p, 1)
	base := zygoteMounts(t, p)
	s := p.slots[0]
	uid := s.uid
	for i := range 3 {
		s.uid = 1<<32 - 1
		r, err := bounded(t, "run on a failing helper", func() (Result, error) {
			return e.Run(context.Background(), quickSpec("/bin/echo", "ran"))
		})
		s.uid = uid
		if !errdefs.Is(err, api.CodeInternal) || !strings.Contains(err.Error(), "sandbox setup") || len(r.Stdout) != 0 {
			t.Errorf("try %d: run on a helper whose setup failed: %+v, %v; want an internal error naming the setup step", i, r, err)
		}
		if r, err := e.Run(context.Background(), quickSpec("/bin/echo", "after")); err != nil || string(r.Stdout) != "after\n" {
			t.Errorf("try %d: run after the failed setup: %+v, %v", i, r, err)
		}
		assertIdle(t, e, p, 1)
		if n := zygoteMounts(t, p); n != base {
			t.Errorf("try %d: zygote mounts %d, were %d", i, n, base)
		}
	}
}

// TestZygoteStatusCountsSetup: a helper still setting up its sandbox is busy
// for STATUS until it waits for its request. The slot's "cgroup" here is a
// full pipe, so the helper blocks in its cgroup join until the test drains it.
func TestZygoteStatusCountsSetup(t *testing.T) {
	e, p := smallEngine(t, 1)
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	defer r.Close()
	defer w.Close()
	for _, chunk := range []int{4096, 1} { // fill it: pages, then the last bytes
		for {
			if _, err := unix.Write(fds[1], make([]byte, chunk)); err != nil {
				break
			}
		}
	}
	if err := unix.SetNonblock(fds[1], false); err != nil {
		t.Fatal(err)
	}
	z, err := startZygote(e.zpath, p.rootfs, t.TempDir(), 1, [][]*os.File{{w}}, e.seccomp)
	if err != nil {
		t.Fatal(err)
	}
	defer z.close()
	id := uint64(1)
	next := func() uint64 { id++; return id }
	if n, err := z.busy(next()); err != nil || n != 0 {
		t.Fatalf("a zygote with no helper: busy %d, %v", n, err)
	}
	if err := z.prepare(&runReq{slot: 0, id: next(), uid: 2100100, gid: 2100100, tmpfsSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	// The helper is cloned; it blocks in its cgroup join however long we wait.
	for range 20 {
		if n, err := z.busy(next()); err != nil || n != 1 {
			t.Fatalf("helper blocked in its setup: busy %d, %v; want 1", n, err)
		}
		time.Sleep(5 * time.Millisecond) // time passes: the helper must stay blocked (busy) through it
	}
	buf := make([]byte, 64<<10) // drain it (the read end is non-blocking)
	for {
		if _, err := unix.Read(fds[0], buf); err != nil {
			break
		}
	}
	testwait.For(t, 30*time.Second, "the helper finishing its setup", func() bool {
		n, err := z.busy(next())
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// waitHelperInRecv waits until p's only slot is free and its helper sleeps
// in recvmsg (its prepared sandbox waits for a request). Under load a helper
// that STATUS counts as waiting may not have entered recvmsg yet.
func waitHelperInRecv(t *testing.T, e *Engine, p *pool) {
	t.Helper()
	if _, err := bounded(t, "WaitIdle", func() (Result, error) { return Result{}, e.WaitIdle(context.Background()) }); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	var hs map[int]int
	inRecv := testwait.Until(10*time.Second, func() bool {
		hs = helpers(t, p)
		inRecv := len(hs) == 1
		for _, sc := range hs {
			inRecv = inRecv && sc == unix.SYS_RECVMSG
		}
		return inRecv && len(p.free) == 1
	})
	if !inRecv {
		t.Fatalf("the slot's helper is not waiting in recvmsg after 10 s: %v (system calls), %d slots free", hs, len(p.free))
	}
}

// TestRunCanceledWhileSent: a run whose context ends while its request is
// on its way to the slot's prepared helper (after the engine's last check
// before the send, here right before it) never starts, however fast the
// real-time helper takes the request: it ends "canceled" with no output,
// many times over. The slot serves the next run.
func TestRunCanceledWhileSent(t *testing.T) {
	e, p := smallEngine(t, 1)
	spec := quickSpec("/bin/echo", "ran")
	if r, err := e.Run(context.Background(), spec); err != nil || string(r.Stdout) != "ran\n" {
		t.Fatalf("first run: %+v, %v", r, err)
	}
	t.Cleanup(func() { e.beforeSend = nil })
	for i := range 50 {
		waitHelperInRecv(t, e, p) // the worst case: it takes the request at once
		s := <-p.free
		ctx, cancel := context.WithCancel(context.Background())
		e.beforeSend = cancel
		r, err := bounded(t, "run canceled while sent", func() (Result, error) { return e.runOn(ctx, p, s, spec) })
		cancel()
		if r.Killed != "canceled" || r.Exited || len(r.Stdout) != 0 || err != nil {
			t.Fatalf("try %d: run canceled while its request was sent: %+v (stdout %q), %v; want killed \"canceled\", never started", i, r, r.Stdout, err)
		}
	}
	e.beforeSend = nil
	if r, err := e.Run(context.Background(), quickSpec("/bin/echo", "after")); err != nil || string(r.Stdout) != "after\n" {
		t.Errorf("run after the cancellations: %+v, %v", r, err)
	}
}

// programAtGate waits until the slot's program (the child of p's only
// helper) sleeps in futex: at its run gate, before its execve. It runs in
// the engine's goroutine, so it reports with t.Errorf.
func programAtGate(t *testing.T, p *pool) {
	t.Helper()
	atGate := testwait.Until(5*time.Second, func() bool {
		for h := range helpers(t, p) {
			kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", h, h))
			for _, k := range strings.Fields(string(kids)) {
				sc, _ := os.ReadFile("/proc/" + k + "/syscall")
				if f := strings.Fields(string(sc)); len(f) > 0 && f[0] == strconv.Itoa(unix.SYS_FUTEX) {
					return true
				}
			}
		}
		return false
	})
	if !atGate {
		t.Errorf("no program waits at its run gate 5 s after its request was sent")
	}
}

// TestRunGate: a program whose request was sent waits, right before its
// execve, until the engine saw the send return: then it runs, or, when the
// run's context ended meanwhile, never starts (killed "canceled", no
// output). The slot serves the next run.
func TestRunGate(t *testing.T) {
	e, p := smallEngine(t, 1)
	spec := quickSpec("/bin/echo", "ran")
	if r, err := e.Run(context.Background(), spec); err != nil || string(r.Stdout) != "ran\n" {
		t.Fatalf("first run: %+v, %v", r, err)
	}
	t.Cleanup(func() { e.afterSend = nil })
	for i := range 10 {
		waitHelperInRecv(t, e, p)
		s := <-p.free
		ctx, cancel := context.WithCancel(context.Background())
		e.afterSend = func() {
			programAtGate(t, p)
			if i%2 == 1 {
				cancel()
			}
		}
		r, err := bounded(t, "run held at its gate", func() (Result, error) { return e.runOn(ctx, p, s, spec) })
		cancel()
		if t.Failed() {
			t.FailNow()
		}
		if i%2 == 0 && (err != nil || !r.Exited || r.ExitCode != 0 || string(r.Stdout) != "ran\n" || r.Killed != "") {
			t.Fatalf("try %d: run let through its gate: %+v (stdout %q), %v; want it to run", i, r, r.Stdout, err)
		}
		if i%2 == 1 && (err != nil || r.Killed != "canceled" || r.Exited || len(r.Stdout) != 0) {
			t.Fatalf("try %d: run canceled at its gate: %+v (stdout %q), %v; want killed \"canceled\", never started", i, r, r.Stdout, err)
		}
	}
	e.afterSend = nil
	if r, err := e.Run(context.Background(), quickSpec("/bin/echo", "after")); err != nil || string(r.Stdout) != "after\n" {
		t.Errorf("run after the gated runs: %+v, %v", r, err)
	}
}

// TestLateKillSparesNextRun: a kill that reaches the zygote after its run
// ended (a canceled run's program kills itself at its gate, and the run's
// helper may be reaped before the zygote reads the kill) leaves the slot's
// next helper alone: before, the zygote took it for the helper of a run
// that had not stored its ID yet and killed it, and a run that helper had
// just taken never heard of its end (it ran into its wall limit).
func TestLateKillSparesNextRun(t *testing.T) {
	e, p := smallEngine(t, 1)
	for i := range 3 {
		if r, err := e.Run(context.Background(), quickSpec("/bin/true")); err != nil || r.ExitCode != 0 {
			t.Fatalf("try %d: run: %+v, %v", i, r, err)
		}
		ended := e.ids.Load() // the run's ID (nothing else ran since)
		waitHelperInRecv(t, e, p)
		before := helpers(t, p)
		z := p.zs[0].z
		z.kill(ended, uint32(p.slots[0].index))
		// control requests are handled in order: the kill was handled
		if _, err := z.busy(e.ids.Add(1)); err != nil {
			t.Fatal(err)
		}
		waitHelperInRecv(t, e, p)
		after := helpers(t, p)
		same := len(after) == len(before)
		for pid := range before {
			_, ok := after[pid]
			same = same && ok
		}
		if !same {
			t.Fatalf("try %d: the slot's helper %v was replaced by %v after a kill for the run that had ended", i, before, after)
		}
	}
	if r, err := e.Run(context.Background(), quickSpec("/bin/echo", "after")); err != nil || string(r.Stdout) != "after\n" {
		t.Errorf("run after the late kills: %+v, %v", r, err)
	}
}
