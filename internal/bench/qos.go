package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

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
}

// QoSPhase is one phase's LS latency and the host's load average during it.
type QoSPhase struct {
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	Maxms   float64 `json:"max_ms"`
	Load1   float64 `json:"loadavg_1m"`
	Samples int     `json:"samples"`
}

// lsScript runs n bursts of burst ms of CPU (thread CPU time) every period ms
// and prints, per burst, the ms from when it was due (its slot, or the end of
// an overrunning predecessor) to its end: wake-up delay plus the burst.
const lsScript = `import sys, time
n, burst, period = int(sys.argv[1]), float(sys.argv[2]) / 1000, float(sys.argv[3]) / 1000
out = []
start = time.monotonic() + 0.05
end = 0.0
for i in range(n):
    # A burst is due at its slot, or when the previous one ended if that
    # overran: lateness never accumulates across bursts.
    t = max(start + i * period, end)
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)
    c0 = time.thread_time()
    while time.thread_time() - c0 < burst:
        pass
    end = time.monotonic()
    out.append((end - t) * 1000)
print("\n".join("%.3f" % x for x in out))
`

// QoS measures an LS task (2 ms CPU bursts every 5 ms) in an LS sandbox:
// alone (the load sandboxes frozen), with load sandboxes spinning on every core
// in the LS class, and with the same sandboxes moved to the BE class at runtime
// (SetCPUClass), alternating the three over rounds.
func QoS(ctx context.Context, o Options) (QoSResult, error) {
	o.defaults()
	if o.N <= 0 || o.N == 100 {
		o.N = 600 // bursts per phase: 3 s
	}
	d, cleanup, err := openNode(ctx, o)
	if err != nil {
		return QoSResult{}, err
	}
	defer cleanup()
	m := d.Manager
	res := QoSResult{BurstMs: 2, PeriodMs: 5, Bursts: o.N, CoreScheduling: d.Driver.CoreScheduling()}
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
	// One run of the LS task: its latencies and the load average meanwhile.
	run := func(n int) ([]time.Duration, float64, error) {
		l0 := loadavg()
		r, err := m.Exec(ctx, ls.ID, api.ExecRequest{Cmd: []string{"python3", "-c", lsScript,
			strconv.Itoa(n), "2", "5"}, TimeoutMs: int64(n)*5 + 30000})
		if err != nil {
			return nil, 0, err
		}
		if r.ExitCode != 0 {
			return nil, 0, fmt.Errorf("LS task: exit %d: %s", r.ExitCode, r.Stderr)
		}
		var lat []time.Duration
		for _, f := range strings.Fields(r.Stdout) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("LS task output %q", f)
			}
			lat = append(lat, time.Duration(v*float64(time.Millisecond)))
		}
		return lat, (l0 + loadavg()) / 2, nil
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
		lat  []time.Duration
		load float64
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
			lat, load, err := run(per)
			if err != nil {
				return res, err
			}
			phases[i].lat = append(phases[i].lat, lat...)
			phases[i].load += load / float64(rounds)
		}
	}
	out := make([]QoSPhase, 3)
	for i, p := range phases {
		s := summarize(p.lat)
		out[i] = QoSPhase{P50ms: s.P50ms, P99ms: s.P99ms, Maxms: s.Maxms, Samples: len(p.lat), Load1: round(p.load, 2)}
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
