package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/pkg/api"
)

// QoSResult is the outcome of `dsec bench qos`: an LS task's burst latency
// unloaded, under BE saturation of every core without CPU classes, and with
// the saturating sandboxes in the BE class, in one run.
type QoSResult struct {
	BurstMs  float64 `json:"burst_ms"`
	PeriodMs float64 `json:"period_ms"`
	Bursts   int     `json:"bursts"`
	Spinners int     `json:"spinners"` // busy loops in the BE sandboxes
	Rounds   int     `json:"rounds"`   // the three phases alternate this many times
	// Each phase: p50/p99/max of (burst end - its scheduled start).
	Unloaded  QoSPhase `json:"unloaded"`
	NoClasses QoSPhase `json:"loaded_no_classes"`
	Classes   QoSPhase `json:"loaded_with_classes"`
	// LSp99ms* repeat the three p99s; Ratio is with classes / unloaded.
	LSp99Unloaded  float64 `json:"ls_p99_ms_unloaded"`
	LSp99NoClasses float64 `json:"ls_p99_ms_loaded_no_classes"`
	LSp99Classes   float64 `json:"ls_p99_ms_loaded_with_classes"`
	Ratio          float64 `json:"ratio_with_classes_vs_unloaded"`
	CoreScheduling bool    `json:"core_scheduling"`
	// LSCPUWeight, LSSliceMs and BESliceMs are what the node gives the
	// classes: the LS parent's cpu weight (v2 scale, 100 the default) and the
	// scheduler slices LS and BE threads ask for (-1: the kernel's default).
	LSCPUWeight int     `json:"ls_cpu_weight"`
	LSSliceMs   float64 `json:"ls_slice_ms"`
	BESliceMs   float64 `json:"be_slice_ms"`
}

// QoSPhase is one phase's LS latency, where it went, and the host's load
// average during it.
type QoSPhase struct {
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	Maxms   float64 `json:"max_ms"`
	Load1   float64 `json:"loadavg_1m"`
	Samples int     `json:"samples"`
	// Tail splits the phase's worst bursts (those at or above its p99, at
	// least 3); Mean splits all of them.
	Tail QoSSplit `json:"tail"`
	Mean QoSSplit `json:"mean"`
	// NodeCPUPct is the node's own CPU time (this process, every thread)
	// during the phase's runs, in % of one core; StealPct the host's steal
	// time (the hypervisor running something else on our vCPUs) in % of
	// all cores.
	NodeCPUPct float64 `json:"node_cpu_pct"`
	StealPct   float64 `json:"steal_pct"`
}

// QoSSplit attributes an LS burst's latency (due → done), from the LS
// thread's own scheduler statistics, as a mean in ms over a set of bursts.
// LatencyMs = WakeMs + BurstMs; WakeMs = WakeRunnableMs + WakeOtherMs;
// BurstMs = PreemptedMs + OnCPUMs + BurstOtherMs.
type QoSSplit struct {
	Bursts    int     `json:"bursts"`
	LatencyMs float64 `json:"latency_ms"`
	// WakeMs: from when the burst was due to the thread running again.
	// WakeRunnableMs is the part it was runnable but waiting for a CPU
	// (scheduler latency); WakeOtherMs the rest (timer expiry, idle exit,
	// interrupt handling, vCPU steal before it ran).
	WakeMs         float64 `json:"wake_ms"`
	WakeRunnableMs float64 `json:"wake_runnable_ms"`
	WakeOtherMs    float64 `json:"wake_other_ms"`
	// BurstMs: the burst's wall time. PreemptedMs is the part it was
	// runnable but off the CPU (preempted by another task); OnCPUMs its CPU
	// time; BurstOtherMs the rest (vCPU steal and interrupt time the kernel
	// does not charge to the thread).
	BurstMs      float64 `json:"burst_ms"`
	PreemptedMs  float64 `json:"preempted_ms"`
	OnCPUMs      float64 `json:"on_cpu_ms"`
	BurstOtherMs float64 `json:"burst_other_ms"`
}

// lsBurst is one burst as lsScript reports it (ms): latency, wake (of which
// runnable), burst wall time (of which runnable, on CPU).
type lsBurst struct{ lat, wake, wakeRunnable, wall, preempted, onCPU float64 }

func parseLSBursts(out string) ([]lsBurst, error) {
	var bs []lsBurst
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 {
			return nil, fmt.Errorf("LS task output %q", line)
		}
		var v [6]float64
		for i, x := range f {
			var err error
			if v[i], err = strconv.ParseFloat(x, 64); err != nil {
				return nil, fmt.Errorf("LS task output %q", line)
			}
		}
		bs = append(bs, lsBurst{v[0], v[1], v[2], v[3], v[4], v[5]})
	}
	return bs, nil
}

// splitBursts is the mean QoSSplit of bs.
func splitBursts(bs []lsBurst) QoSSplit {
	var s QoSSplit
	if len(bs) == 0 {
		return s
	}
	for _, b := range bs {
		s.LatencyMs += b.lat
		s.WakeMs += b.wake
		s.WakeRunnableMs += min(b.wakeRunnable, b.wake)
		s.BurstMs += b.wall
		s.PreemptedMs += min(b.preempted, b.wall)
		s.OnCPUMs += min(b.onCPU, b.wall)
	}
	n := float64(len(bs))
	r := func(f float64) float64 { return round(f/n, 3) }
	s = QoSSplit{Bursts: len(bs), LatencyMs: r(s.LatencyMs), WakeMs: r(s.WakeMs), WakeRunnableMs: r(s.WakeRunnableMs),
		BurstMs: r(s.BurstMs), PreemptedMs: r(s.PreemptedMs), OnCPUMs: r(s.OnCPUMs)}
	s.WakeOtherMs = round(max(s.WakeMs-s.WakeRunnableMs, 0), 3)
	s.BurstOtherMs = round(max(s.BurstMs-s.PreemptedMs-s.OnCPUMs, 0), 3)
	return s
}

// tailBursts are the bursts at or above the p99 of bs (at least 3).
func tailBursts(bs []lsBurst) []lsBurst {
	s := slices.Clone(bs)
	slices.SortFunc(s, func(a, b lsBurst) int { return cmp.Compare(b.lat, a.lat) })
	k := max(len(s)-int(math.Ceil(0.99*float64(len(s))))+1, 3)
	return s[:min(k, len(s))]
}

// cpuClock is this process's CPU time (all threads) and the host's steal
// time (all CPUs), for a phase's node and steal figures.
type cpuClock struct{ self, steal, wall time.Duration }

func readCPUClock() cpuClock {
	c := cpuClock{wall: time.Duration(time.Now().UnixNano())}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if f := strings.Fields(line); len(f) > 8 && f[0] == "cpu" {
			v, _ := strconv.ParseInt(f[8], 10, 64)
			c.steal = time.Duration(v) * 10 * time.Millisecond // USER_HZ 100
		}
	}
	return c
}

// lsScript runs n bursts of burst ms of CPU (thread CPU time) every period ms
// and prints, per burst, the ms from when it was due (its slot, or the end of
// an overrunning predecessor) to its end: wake-up delay plus the burst. Each
// line also splits that time with the thread's scheduler statistics
// (runnable-but-waiting ns from /proc/thread-self/schedstat, on-CPU ns from
// the thread's CPU clock): the wait between the sleep's return being due and
// the thread running again, the part of that spent runnable, the burst's wall
// time, the part of it spent runnable (preempted) and on the CPU.
const lsScript = `import sys, time
n, burst, period = int(sys.argv[1]), float(sys.argv[2]) / 1000, float(sys.argv[3]) / 1000
f = open("/proc/thread-self/schedstat", "rb", buffering=0)
def st():
    # CPU time from the thread's clock (exact), not schedstat's first field:
    # that one is as old as the kernel's last accounting of this thread (up
    # to a tick). Time runnable but waiting (the second field) ends when it
    # runs, so it is exact here.
    f.seek(0)
    a = f.read(128).split()
    return time.thread_time_ns(), int(a[1])
out = []
start = time.monotonic() + 0.05
end = 0.0
for i in range(n):
    # A burst is due at its slot, or when the previous one ended if that
    # overran: lateness never accumulates across bursts.
    t = max(start + i * period, end)
    _, w0 = st()
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)
    c1, w1 = st()
    woke = time.monotonic()
    c0 = time.thread_time()
    while time.thread_time() - c0 < burst:
        pass
    end = time.monotonic()
    c2, w2 = st()
    out.append("%.3f %.3f %.3f %.3f %.3f %.3f" % ((end - t) * 1000, max(woke - t, 0) * 1000, (w1 - w0) / 1e6,
        (end - woke) * 1000, (w2 - w1) / 1e6, (c2 - c1) / 1e6))
print("\n".join(out))
`

// QoS measures an LS task (2 ms CPU bursts every 5 ms) in an LS sandbox:
// alone (the load sandboxes frozen), with load sandboxes spinning on every core
// in the LS class, and with the same sandboxes moved to the BE class at runtime
// (SetCPUClass), alternating the three over rounds.
func QoS(ctx context.Context, o Options, mods ...func(*daemon.Config)) (QoSResult, error) {
	o.defaults()
	if o.N <= 0 || o.N == 100 {
		o.N = 600 // bursts per phase: 3 s
	}
	d, cleanup, err := openNode(ctx, o, mods...)
	if err != nil {
		return QoSResult{}, err
	}
	defer cleanup()
	m := d.Manager
	res := QoSResult{BurstMs: 2, PeriodMs: 5, Bursts: o.N, CoreScheduling: d.Driver.CoreScheduling(),
		LSCPUWeight: d.Driver.LSCPUWeight(), LSSliceMs: -1, BESliceMs: -1}
	if sl := d.Driver.LSSlice(); sl > 0 {
		res.LSSliceMs = ms(sl)
	}
	if sl := d.Driver.BESlice(); sl > 0 {
		res.BESliceMs = ms(sl)
	}
	ls, err := m.Create(ctx, api.CreateSandboxRequest{Image: o.Image, CPUClass: api.CPUClassLS, CPU: 1})
	if err != nil {
		return res, fmt.Errorf("create LS sandbox: %w", err)
	}
	cores := runtime.NumCPU()
	res.Spinners = 2 * cores
	var spinners []string
	for range cores {
		sb, err := m.Create(ctx, api.CreateSandboxRequest{Image: o.Image, CPUClass: api.CPUClassLS, CPU: 2})
		if err != nil {
			return res, fmt.Errorf("create load sandbox: %w", err)
		}
		spinners = append(spinners, sb.ID)
	}
	// One run of the LS task: its bursts, the load average meanwhile, and the
	// CPU clocks around it.
	type runOut struct {
		bursts []lsBurst
		load   float64
		c0, c1 cpuClock
	}
	run := func(n int) (runOut, error) {
		l0, c0 := loadavg(), readCPUClock()
		r, err := m.Exec(ctx, ls.ID, api.ExecRequest{Cmd: []string{"python3", "-c", lsScript,
			strconv.Itoa(n), "2", "5"}, TimeoutMs: int64(n)*5 + 30000})
		if err != nil {
			return runOut{}, err
		}
		c1 := readCPUClock()
		if r.ExitCode != 0 {
			return runOut{}, fmt.Errorf("LS task: exit %d: %s", r.ExitCode, r.Stderr)
		}
		bs, err := parseLSBursts(r.Stdout)
		if err != nil {
			return runOut{}, err
		}
		return runOut{bs, (l0 + loadavg()) / 2, c0, c1}, nil
	}
	// Two busy loops per core, in sandboxes that start LS and frozen.
	for _, id := range spinners {
		if _, err := m.StartProcess(ctx, id, api.ExecRequest{Shell: "while :; do :; done & while :; do :; done"}); err != nil {
			return res, fmt.Errorf("start load: %w", err)
		}
		if _, err := m.Pause(ctx, id); err != nil {
			return res, err
		}
	}
	setLoad := func(on bool, class string) error {
		for _, id := range spinners {
			sb, err := m.Get(ctx, id)
			if err != nil {
				return err
			}
			if sb.CPUClass != class {
				if _, err := m.SetCPUClass(ctx, id, class); err != nil {
					return fmt.Errorf("cpu class %s: %w", class, err)
				}
			}
			switch {
			case on && sb.State == api.StatePaused:
				_, err = m.Resume(ctx, id)
			case !on && sb.State != api.StatePaused:
				_, err = m.Pause(ctx, id)
			}
			if err != nil {
				return err
			}
		}
		time.Sleep(200 * time.Millisecond)
		return nil
	}
	// The three configurations alternate over rounds, so load from outside the
	// benchmark (a shared machine) weighs on all of them alike.
	rounds := 3
	per := max(o.N/rounds, 50)
	type acc struct {
		bursts            []lsBurst
		load              float64
		self, steal, wall time.Duration
	}
	var phases [3]acc
	configs := []struct {
		on    bool
		class string
	}{{false, api.CPUClassLS}, {true, api.CPUClassLS}, {true, api.CPUClassBE}}
	for range rounds {
		for i, c := range configs {
			if err := setLoad(c.on, c.class); err != nil {
				return res, err
			}
			r, err := run(per)
			if err != nil {
				return res, err
			}
			p := &phases[i]
			p.bursts = append(p.bursts, r.bursts...)
			p.load += r.load / float64(rounds)
			p.self += r.c1.self - r.c0.self
			p.steal += r.c1.steal - r.c0.steal
			p.wall += r.c1.wall - r.c0.wall
		}
	}
	out := make([]QoSPhase, 3)
	for i, p := range phases {
		lat := make([]time.Duration, len(p.bursts))
		for j, b := range p.bursts {
			lat[j] = time.Duration(b.lat * float64(time.Millisecond))
		}
		s := summarize(lat)
		out[i] = QoSPhase{P50ms: s.P50ms, P99ms: s.P99ms, Maxms: s.Maxms, Samples: len(lat), Load1: round(p.load, 2),
			Tail: splitBursts(tailBursts(p.bursts)), Mean: splitBursts(p.bursts)}
		if p.wall > 0 {
			out[i].NodeCPUPct = round(100*float64(p.self)/float64(p.wall), 1)
			out[i].StealPct = round(100*float64(p.steal)/float64(p.wall)/float64(cores), 1)
		}
	}
	res.Unloaded, res.NoClasses, res.Classes = out[0], out[1], out[2]
	res.Bursts, res.Rounds = per*rounds, rounds
	res.LSp99Unloaded, res.LSp99NoClasses, res.LSp99Classes = res.Unloaded.P99ms, res.NoClasses.P99ms, res.Classes.P99ms
	if res.Unloaded.P99ms > 0 {
		res.Ratio = round(res.Classes.P99ms/res.Unloaded.P99ms, 2)
	}
	return res, nil
}

// loadavg is the host's 1-minute load average.
func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
