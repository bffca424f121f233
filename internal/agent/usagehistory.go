package agent

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// usageHistoryKeep bounds a sandbox's usage history (the oldest samples go
// first): five minutes at one sample per api.UsageSamplePeriod.
const usageHistoryKeep = 60

// usageHistory is a sandbox's recent usage samples, taken when asked
// (UsageHistory) and kept by the node, so that every API server answers the
// same series. Its zero value is ready.
type usageHistory struct {
	sampling sync.Mutex // one sample at a time: a concurrent request waits and finds it fresh
	mu       sync.Mutex // guards samples and lastCPU
	samples  []api.UsageSample
	lastCPU  float64 // CPU seconds at the newest sample (-1: unknown)
}

// fresh says whether the newest sample is younger than the sampling period at now.
func (h *usageHistory) fresh(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.samples)
	return n > 0 && now.Sub(h.samples[n-1].At) < api.UsageSamplePeriod
}

// add keeps s (with the CPU seconds it was computed from) as the newest
// sample, unless one younger than the sampling period at s's time is there.
func (h *usageHistory) add(s api.UsageSample, cpuSeconds float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.samples)
	if n > 0 && s.At.Sub(h.samples[n-1].At) < api.UsageSamplePeriod {
		return
	}
	if n >= usageHistoryKeep {
		h.samples = append(h.samples[:0], h.samples[n-usageHistoryKeep+1:]...)
	}
	h.samples = append(h.samples, s)
	h.lastCPU = cpuSeconds
}

// previous is the newest sample's time and CPU seconds (ok false: none).
func (h *usageHistory) previous() (at time.Time, cpu float64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); n > 0 {
		return h.samples[n-1].At, h.lastCPU, true
	}
	return time.Time{}, 0, false
}

// window is the samples taken from start to api.UsageSamplePeriod after end
// (nil: unbounded), oldest first.
func (h *usageHistory) window(start, end *time.Time) []api.UsageSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []api.UsageSample{}
	for _, s := range h.samples {
		if (start == nil || !s.At.Before(*start)) && (end == nil || !s.At.After(end.Add(api.UsageSamplePeriod))) {
			out = append(out, s)
		}
	}
	return out
}

// cpuPercent is the CPU used between two readings (seconds at from and at
// to) in percent of cores cores, 0..100, two decimals.
func cpuPercent(from, to time.Time, before, now, cores float64) float64 {
	wall := to.Sub(from).Seconds()
	if wall <= 0 || cores <= 0 || now < before {
		return 0
	}
	pct := 100 * (now - before) / (wall * cores)
	return math.Round(min(max(pct, 0), 100)*100) / 100
}

// UsageHistory implements session.Service: sandbox id's usage samples in the
// window of req, after taking one if the window reaches the present and the
// newest sample is older than api.UsageSamplePeriod. A sample holds the CPU
// use since the previous sample (since creation for the first), the memory
// charged and the limits (Usage), and the root file system's use as df sees
// it inside the sandbox (`stat -f /`, run as root; 0 when the sandbox cannot
// run it, e.g. while paused).
func (m *Manager) UsageHistory(ctx context.Context, id string, req api.UsageHistoryRequest) ([]api.UsageSample, error) {
	sb, err := m.get(id)
	if err != nil {
		return nil, err
	}
	now := m.now()
	present := (req.Start == nil || !req.Start.After(now)) && (req.End == nil || !req.End.Add(api.UsageSamplePeriod).Before(now))
	if present && !sb.hist.fresh(now) {
		sb.hist.sampling.Lock()
		if now = m.now(); !sb.hist.fresh(now) {
			s, cpu := m.usageSample(ctx, sb, id, now)
			sb.hist.add(s, cpu)
		}
		sb.hist.sampling.Unlock()
	}
	return sb.hist.window(req.Start, req.End), nil
}

// usageSample reads sb's use at now; it returns the sample and the CPU
// seconds it was computed from.
func (m *Manager) usageSample(ctx context.Context, sb *sandbox, id string, now time.Time) (api.UsageSample, float64) {
	u, _ := sb.usage(AllCounters)
	sb.mu.Lock()
	created := sb.rec.CreatedAt
	sb.mu.Unlock()
	s := api.UsageSample{At: now.UTC(), CPULimit: u.CPULimit, MemoryBytes: max(u.MemoryBytes, 0), MemoryLimitBytes: u.MemoryLimitBytes}
	if u.CPUSeconds >= 0 {
		from, before, ok := sb.hist.previous()
		if !ok || before < 0 || u.CPUSeconds < before {
			from, before = created, 0
		}
		s.CPUPercent = cpuPercent(from, now, before, u.CPUSeconds, cmpCores(u.CPULimit))
	}
	if u.State == api.StateRunning {
		s.DiskUsedBytes, s.DiskTotalBytes = m.diskUse(ctx, id)
	}
	return s, u.CPUSeconds
}

// cmpCores is the cores a CPU percentage is of: the limit, or one core.
func cmpCores(limit float64) float64 {
	if limit > 0 {
		return limit
	}
	return 1
}

// diskUse is the used and total bytes of the sandbox's root file system
// (0, 0 when they cannot be read).
func (m *Manager) diskUse(ctx context.Context, id string) (used, total int64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := m.Exec(ctx, id, api.ExecRequest{Cmd: []string{"stat", "-f", "-c", "%S %b %f", "/"}, User: "root", Cwd: "/"})
	if err != nil || res.ExitCode != 0 {
		return 0, 0
	}
	return parseStatfs(res.Stdout)
}

// parseStatfs reads `stat -f -c "%S %b %f"` (block size, blocks, free
// blocks) as used and total bytes.
func parseStatfs(out string) (used, total int64) {
	f := strings.Fields(out)
	if len(f) != 3 {
		return 0, 0
	}
	var n [3]int64
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, 0
		}
		n[i] = v
	}
	if n[2] > n[1] {
		return 0, 0
	}
	return (n[1] - n[2]) * n[0], n[1] * n[0]
}
