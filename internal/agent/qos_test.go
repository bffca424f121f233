package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/bench"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/hostfeat"
	"github.com/dsec-dev/dsec/internal/reclaim"
	"github.com/dsec-dev/dsec/internal/reclaim/damontest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// sandboxGroup opens a sandbox's cgroup as the driver placed it.
func (e *env) sandboxGroup(t *testing.T, id string) *cgroups.Group {
	t.Helper()
	h, err := cgroups.Detect("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	g, err := h.Open(e.dcfg.CgroupParent + "/" + id)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// checkClass asserts where the sandbox's processes are scheduled from the
// host's view: the cpu cgroup of init (/proc/PID/cgroup), the idle flag of the
// parent it sits in, and the policy of every thread in the sandbox.
func (e *env) checkClass(t *testing.T, id, class string) {
	t.Helper()
	g := e.sandboxGroup(t, id)
	pid := e.initPID(t, id)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var cpuPath string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ",cpu,") {
			cpuPath = parts[2]
		}
	}
	underIdle := strings.Contains(cpuPath, "-"+cgroups.IdleParent+"/")
	if underIdle != (class == api.CPUClassBE) {
		t.Errorf("class %s: init's cpu cgroup is %q", class, cpuPath)
	}
	if class == api.CPUClassBE {
		v, err := os.ReadFile(filepath.Join(g.IdleCPUDir(), "cpu.idle"))
		if err != nil || strings.TrimSpace(string(v)) != "1" {
			t.Errorf("idle parent %s: cpu.idle %q, %v", g.IdleCPUDir(), v, err)
		}
	}
	tids, err := g.Threads()
	if err != nil || len(tids) < 2 {
		t.Fatalf("threads of %s: %v %v", id, tids, err)
	}
	want := unix.SCHED_NORMAL
	if class == api.CPUClassBE {
		want = unix.SCHED_IDLE
	}
	// LS threads ask for the LS slice where the kernel has custom slices
	// (it reports our own base slice then).
	customSlices, _ := cgroups.SchedSlice(os.Getpid())
	for _, tid := range tids {
		if p, err := cgroups.SchedPolicy(tid); err == nil && p != want {
			t.Errorf("class %s: thread %d has policy %d, want %d", class, tid, p, want)
		}
		if sl, err := cgroups.SchedSlice(tid); err == nil && class == api.CPUClassLS && customSlices > 0 && sl != container.DefaultLSSlice {
			t.Errorf("class %s: thread %d has slice %v, want %v", class, tid, sl, container.DefaultLSSlice)
		}
	}
}

const threadsScript = `import threading, time
for _ in range(3):
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
open("/tmp/threads-up", "w").close()
time.sleep(600)`

func TestCPUClasses(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	ctx := ctxT(t)
	be := create(t, m, api.CreateSandboxRequest{CPUClass: api.CPUClassBE})
	ls := create(t, m, api.CreateSandboxRequest{}) // the node default: ls
	if be.CPUClass != api.CPUClassBE || ls.CPUClass != api.CPUClassLS {
		t.Fatalf("classes %q %q", be.CPUClass, ls.CPUClass)
	}
	for _, id := range []string{be.ID, ls.ID} {
		if _, err := m.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", threadsScript}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "threads", func() bool {
			r, err := m.Exec(ctx, id, api.ExecRequest{Cmd: []string{"test", "-e", "/tmp/threads-up"}})
			return err == nil && r.ExitCode == 0
		})
	}
	e.checkClass(t, be.ID, api.CPUClassBE)
	e.checkClass(t, ls.ID, api.CPUClassLS)
	// The sandboxes' parent outweighs the rest of the host.
	h, err := cgroups.Detect("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if w, err := h.CPUWeight(e.dcfg.CgroupParent); err != nil || w != container.DefaultLSCPUWeight {
		t.Errorf("cpu weight of %s: %d %v, want %d", e.dcfg.CgroupParent, w, err, container.DefaultLSCPUWeight)
	}

	// Changing the class moves the sandbox and its threads, both ways.
	sbx, err := m.SetCPUClass(ctx, be.ID, api.CPUClassLS)
	if err != nil || sbx.CPUClass != api.CPUClassLS {
		t.Fatalf("SetCPUClass ls: %+v %v", sbx, err)
	}
	e.checkClass(t, be.ID, api.CPUClassLS)
	if _, err := m.SetCPUClass(ctx, ls.ID, api.CPUClassBE); err != nil {
		t.Fatal(err)
	}
	e.checkClass(t, ls.ID, api.CPUClassBE)
	// A process started after the change inherits the class from init.
	if out := shOK(t, m, ls.ID, "grep -E '^policy' /proc/self/sched || true"); out != "" && !strings.Contains(out, " 5") {
		t.Errorf("new process in a be sandbox: %q", out)
	}
	if got, _ := m.Get(ctx, ls.ID); got.CPUClass != api.CPUClassBE {
		t.Errorf("Get: class %q", got.CPUClass)
	}

	// Bad input: a clear invalid_argument and nothing changed.
	_, err = m.Create(ctx, api.CreateSandboxRequest{CPUClass: "rt"})
	wantCode(t, "create cpu_class rt", err, api.CodeInvalidArgument)
	_, err = m.SetCPUClass(ctx, ls.ID, "fast")
	wantCode(t, "set cpu_class fast", err, api.CodeInvalidArgument)
	e.checkClass(t, ls.ID, api.CPUClassBE)
	_, err = m.SetCPUClass(ctx, "sb-0000000000000000.test", api.CPUClassBE)
	wantCode(t, "unknown sandbox", err, api.CodeNotFound)
}

func TestCPUClassDefaultBE(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, func(c *agent.Config) { c.QoS.DefaultCPUClass = api.CPUClassBE })
	sb := create(t, m, api.CreateSandboxRequest{})
	if sb.CPUClass != api.CPUClassBE {
		t.Fatalf("default class %q", sb.CPUClass)
	}
	if info, _ := m.Info(ctxT(t)); info.QoS == nil || info.QoS.DefaultCPUClass != api.CPUClassBE || info.QoS.CoreScheduling != cgroups.CoreSchedAvailable() {
		t.Errorf("info.qos %+v", info.QoS)
	}
}

// holder starts bench.MemHoldScript (mb MiB) in a sandbox, waits for its
// checksum and returns it with the process's host pid.
func holder(t *testing.T, e *env, m *agent.Manager, id string, mb int) (string, int) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := m.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", bench.MemHoldScript(mb, 512)}}); err != nil {
		t.Fatal(err)
	}
	var sum string
	waitFor(t, 30*time.Second, "checksum", func() bool {
		r, err := m.Exec(ctx, id, api.ExecRequest{Cmd: []string{"cat", "/tmp/sum1"}})
		sum = r.Stdout
		return err == nil && r.ExitCode == 0 && len(sum) == 64
	})
	pids, err := e.sandboxGroup(t, id).Procs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.HasPrefix(string(b), "python") {
			return sum, p
		}
	}
	t.Fatalf("no python process among %v", pids)
	return "", 0
}

func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// checkRestored resumes and asks the holder to checksum its memory again.
func checkRestored(t *testing.T, m *agent.Manager, id, sum string, pid int) {
	t.Helper()
	ctx := ctxT(t)
	if sbx, err := m.Resume(ctx, id); err != nil || sbx.State != api.StateRunning || sbx.Reclaimed {
		t.Fatalf("Resume: %+v %v", sbx, err)
	}
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "checksum after resume", func() bool {
		r, err := m.Exec(ctx, id, api.ExecRequest{Cmd: []string{"cat", "/tmp/sum2"}})
		if err == nil && r.ExitCode == 0 && len(r.Stdout) == 64 {
			if r.Stdout != sum {
				t.Fatalf("memory changed across pause/reclaim/resume: %s != %s", r.Stdout, sum)
			}
			return true
		}
		return false
	})
}

// reclaimLog is an agent.Observer that adds up the reclaimed bytes it is told.
type reclaimLog struct {
	mu    sync.Mutex
	bytes map[string]int64
}

func (*reclaimLog) Phase(string, string, time.Duration, error) {}

func (l *reclaimLog) Reclaimed(how string, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bytes == nil {
		l.bytes = map[string]int64{}
	}
	l.bytes[how] += n
}

func (l *reclaimLog) get(how string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes[how]
}

func TestPauseReclaimToSwap(t *testing.T) {
	e := newEnv(t)
	z := testZram(t)
	obs := &reclaimLog{}
	m := e.open(t, func(c *agent.Config) { c.Observer = obs })
	ctx := ctxT(t)
	sb := create(t, m, api.CreateSandboxRequest{MemoryBytes: 512 << 20})
	sum, pid := holder(t, e, m, sb.ID, 64)
	before := rssBytes(t, pid)
	if before < 64<<20 {
		t.Fatalf("holder RSS %d before reclaim", before)
	}
	res, err := m.PauseWith(ctx, sb.ID, api.PauseRequest{Reclaim: true})
	if err != nil {
		t.Fatal(err)
	}
	after := rssBytes(t, pid)
	t.Logf("reclaim: %+v; holder RSS %d -> %d", *res.Reclaim, before, after)
	if res.State != api.StatePaused || !res.Reclaimed || !res.Reclaim.Swap || res.Reclaim.Note != "" {
		t.Errorf("answer %+v", res)
	}
	if res.Reclaim.SwappedBytes < 48<<20 {
		t.Errorf("swapped %d bytes, want most of 64 MiB", res.Reclaim.SwappedBytes)
	}
	if got, want := obs.get("pause"), res.Reclaim.SwappedBytes+res.Reclaim.PageCacheDroppedBytes; got != want {
		t.Errorf("the observer was told of %d reclaimed bytes, want %d", got, want)
	}
	if after > before/4 {
		t.Errorf("resident memory %d -> %d: not pushed out", before, after)
	}
	if orig, _, _ := z.Stats(); orig < 48<<20 {
		t.Errorf("zram holds %d bytes", orig)
	}
	checkRestored(t, m, sb.ID, sum, pid)
	if r := rssBytes(t, pid); r < 60<<20 {
		t.Errorf("RSS after resume and checksum %d", r)
	}
}

func TestPauseReclaimWithoutSwap(t *testing.T) {
	e := newEnv(t)
	if free, _ := reclaim.SwapFree(); free > 0 {
		t.Skipf("the host has %d bytes of swap someone else set up; the no-swap case needs none", free)
	}
	m := e.open(t, nil)
	ctx := ctxT(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	sum, pid := holder(t, e, m, sb.ID, 32)
	// Page cache charged to the sandbox: a file of the image read for the first
	// time (dropped from the host cache first).
	lower := filepath.Join(imagesDir(), "debian", "rootfs", "usr", "bin", "python3.11")
	if f, err := os.Open(lower); err == nil {
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
	shOK(t, m, sb.ID, "cat /usr/bin/python3.11 > /dev/null")
	before := rssBytes(t, pid)
	res, err := m.PauseWith(ctx, sb.ID, api.PauseRequest{Reclaim: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reclaim: %+v", *res.Reclaim)
	if res.Reclaim.Swap || res.Reclaim.Note != "no swap: page cache only" || res.Reclaim.SwappedBytes != 0 {
		t.Errorf("answer %+v", *res.Reclaim)
	}
	if res.Reclaim.PageCacheDroppedBytes < 1<<20 {
		t.Errorf("page cache dropped %d bytes", res.Reclaim.PageCacheDroppedBytes)
	}
	if after := rssBytes(t, pid); after < before*9/10 {
		t.Errorf("anonymous memory went somewhere without swap: RSS %d -> %d", before, after)
	}
	checkRestored(t, m, sb.ID, sum, pid)
}

// noReclaim hides the container instances' reclaim capability (a backend that
// can pause but not reclaim).
type noReclaim struct{ driver.Driver }

type pauseOnly interface {
	driver.Instance
	driver.Pauser
}

func (d noReclaim) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	inst, err := d.Driver.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return struct{ pauseOnly }{inst.(pauseOnly)}, nil
}

func TestPauseReclaimNeedsCapability(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, func(c *agent.Config) { c.Driver = noReclaim{c.Driver} })
	ctx := ctxT(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	_, err := m.PauseWith(ctx, sb.ID, api.PauseRequest{Reclaim: true})
	wantCode(t, "reclaim without the capability", err, api.CodeInvalidArgument)
	if got, _ := m.Get(ctx, sb.ID); got.State != api.StateRunning {
		t.Errorf("state after a refused reclaim: %s", got.State)
	}
	if res, err := m.PauseWith(ctx, sb.ID, api.PauseRequest{}); err != nil || res.State != api.StatePaused {
		t.Errorf("plain pause: %+v %v", res, err)
	}
	if _, err := m.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// testZram is a zram swap device the test owns, removed when it ends.
func testZram(t *testing.T) *reclaim.Zram {
	t.Helper()
	z, err := reclaim.SetupZram(1<<30, t.TempDir(), filepath.Join(t.TempDir(), "swap.json"))
	if err != nil {
		t.Fatalf("zram: %v", err)
	}
	t.Cleanup(func() {
		if err := z.Close(); err != nil {
			t.Errorf("remove zram: %v", err)
		}
		if _, err := os.Stat(fmt.Sprintf("/sys/block/zram%d", z.N)); err == nil {
			t.Errorf("zram%d still exists", z.N)
		}
	})
	return z
}

func TestIdleReclaim(t *testing.T) {
	e := newEnv(t)
	testZram(t)
	obs := &reclaimLog{}
	m := e.open(t, func(c *agent.Config) {
		c.QoS.IdleReclaimAfter = time.Minute
		c.QoS.IdleReclaimEvery = 100 * time.Millisecond
		c.QoS.IdleReclaimPause = time.Millisecond
		c.Observer = obs
	})
	idle := create(t, m, api.CreateSandboxRequest{})
	busy := create(t, m, api.CreateSandboxRequest{})
	_, idlePID := holder(t, e, m, idle.ID, 32)
	_, busyPID := holder(t, e, m, busy.ID, 32)
	idleRSS, busyRSS := rssBytes(t, idlePID), rssBytes(t, busyPID)
	// Only time tells idle from busy: the clock jumps past the threshold and the
	// busy sandbox is used again right away.
	e.clock.Advance(2 * time.Minute)
	shOK(t, m, busy.ID, "true")
	waitFor(t, 20*time.Second, "idle sandbox paged out", func() bool { return rssBytes(t, idlePID) < idleRSS/4 })
	waitFor(t, 20*time.Second, "idle reclaim reported", func() bool { return obs.get("idle") >= 16<<20 })
	if r := rssBytes(t, busyPID); r < busyRSS*9/10 {
		t.Errorf("busy sandbox paged out too: RSS %d -> %d", busyRSS, r)
	}
}

func TestIdleReclaimDAMON(t *testing.T) {
	e := newEnv(t)
	fake := damontest.New(t, 0)
	d, err := reclaim.OpenDAMON(fake.Root, fake, filepath.Join(t.TempDir(), "damon.json"), reclaim.DefaultDAMONScheme())
	if err != nil {
		t.Fatal(err)
	}
	m := e.open(t, func(c *agent.Config) {
		c.QoS.IdleReclaimAfter = time.Minute
		c.QoS.IdleReclaimEvery = 100 * time.Millisecond
		c.QoS.DAMON = d
	})
	idle := create(t, m, api.CreateSandboxRequest{})
	busy := create(t, m, api.CreateSandboxRequest{})
	e.clock.Advance(2 * time.Minute)
	shOK(t, m, busy.ID, "true")
	idlePID, busyPID := e.initPID(t, idle.ID), e.initPID(t, busy.ID)
	waitFor(t, 10*time.Second, "kdamond monitoring the idle sandbox", func() bool {
		return fake.Get(t, "kdamonds/0/state") == "on" && slices.Contains(d.Running(), idlePID)
	})
	if slices.Contains(d.Running(), busyPID) {
		t.Errorf("busy sandbox's init %d handed to DAMON: %v", busyPID, d.Running())
	}
	if got := fake.Get(t, "kdamonds/0/contexts/0/schemes/0/action"); got != "pageout" {
		t.Errorf("scheme action %q", got)
	}
	if info, _ := m.Info(ctxT(t)); info.QoS == nil || !info.QoS.DAMON {
		t.Errorf("info.qos %+v", info.QoS)
	}
}

func TestKSMOptIn(t *testing.T) {
	e := newEnv(t)
	hostfeat.Need(t, hostfeat.KSM)
	m := e.open(t, nil)
	ctx := ctxT(t)
	on := create(t, m, api.CreateSandboxRequest{KSM: true})
	off := create(t, m, api.CreateSandboxRequest{})
	if !on.KSM || off.KSM {
		t.Errorf("ksm flags %v %v", on.KSM, off.KSM)
	}
	for _, c := range []struct {
		id   string
		want bool
	}{{on.ID, true}, {off.ID, false}} {
		if got, err := reclaim.KSMMergeAny(e.initPID(t, c.id)); err != nil || got != c.want {
			t.Errorf("init of %s: ksm_merge_any %v (%v), want %v", c.id, got, err, c.want)
		}
		// Every process the sandbox starts inherits it (fork and exec).
		if _, err := m.StartProcess(ctx, c.id, api.ExecRequest{Cmd: []string{"sleep", "600"}}); err != nil {
			t.Fatal(err)
		}
		pids, _ := e.sandboxGroup(t, c.id).Procs()
		for _, pid := range pids {
			if got, err := reclaim.KSMMergeAny(pid); err == nil && got != c.want {
				t.Errorf("process %d of %s: ksm_merge_any %v, want %v", pid, c.id, got, c.want)
			}
		}
		if len(pids) < 2 {
			t.Errorf("processes of %s: %v", c.id, pids)
		}
	}
}

// A restarted agent finds the class where the cgroup is, and a reclaimed
// paused sandbox still gets its prefetch on resume.
func TestQoSAcrossRestart(t *testing.T) {
	e := newEnv(t)
	testZram(t)
	m1 := e.open(t, nil)
	ctx := ctxT(t)
	sb := create(t, m1, api.CreateSandboxRequest{CPUClass: api.CPUClassBE})
	sum, pid := holder(t, e, m1, sb.ID, 16)
	if _, err := m1.PauseWith(ctx, sb.ID, api.PauseRequest{Reclaim: true}); err != nil {
		t.Fatal(err)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := e.open(t, nil)
	got, err := m2.Get(ctx, sb.ID)
	if err != nil || got.CPUClass != api.CPUClassBE || got.State != api.StatePaused || !got.Reclaimed {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	e.checkClass(t, sb.ID, api.CPUClassBE)
	checkRestored(t, m2, sb.ID, sum, pid)
	if _, err := m2.SetCPUClass(ctx, sb.ID, api.CPUClassLS); err != nil {
		t.Fatal(err)
	}
	e.checkClass(t, sb.ID, api.CPUClassLS)
}
