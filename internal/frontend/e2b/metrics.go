package e2b

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// GET /sandboxes/{id}/metrics answers a series of samples, oldest first, as
// E2B's does (E2B samples every 5 s whether asked or not; dsec samples when
// asked, at most once per metricsBucket, and keeps the last metricsKeep
// samples of each sandbox in the API server that took them). A sample holds
// the CPU use since the previous sample (since the sandbox's creation for
// the first), memory charged and its limit (session's SandboxUsage), and the
// disk as df sees it inside the sandbox (statfs of / through `stat -f`; 0
// when the sandbox cannot run it, e.g. while paused). A request whose
// ?start=&end= window (Unix seconds) reaches the present takes a sample
// unless the last one is younger than metricsBucket; the answer is the kept
// samples taken within the window (up to metricsBucket after its end, E2B's
// sampling period).

const (
	metricsBucket = 5 * time.Second
	// cpuSampleTTL: an older previous sample is not used for a CPU delta.
	cpuSampleTTL = 5 * time.Minute
	// maxCPUSamples bounds the sandboxes whose samples are kept.
	maxCPUSamples = 10_000
	// metricsKeep bounds the samples kept per sandbox (the oldest go
	// first): five minutes at one per metricsBucket.
	metricsKeep = 60
)

// cpuSample is a sandbox's CPU time at one moment.
type cpuSample struct {
	at      time.Time
	seconds float64
}

// cpuSamples keeps each sandbox's last CPU reading and its recent metrics
// samples (its zero value is ready).
type cpuSamples struct {
	mu     sync.Mutex
	last   map[string]cpuSample
	series map[string][]e2bapi.SandboxMetric // oldest first, at most metricsKeep
}

// fresh says whether sandbox id has a sample younger than metricsBucket at now.
func (c *cpuSamples) fresh(id string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := c.series[id]
	return len(ms) > 0 && now.Sub(ms[len(ms)-1].Timestamp) < metricsBucket
}

// record keeps m as sandbox id's newest sample, unless a sample taken
// meanwhile (a concurrent request) is younger than metricsBucket at m's
// time.
func (c *cpuSamples) record(id string, m e2bapi.SandboxMetric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.series == nil {
		c.series = map[string][]e2bapi.SandboxMetric{}
	}
	ms := c.series[id]
	if len(ms) > 0 && m.Timestamp.Sub(ms[len(ms)-1].Timestamp) < metricsBucket {
		return
	}
	if len(ms) == 0 && len(c.series) >= maxCPUSamples {
		for k, v := range c.series { // the sandboxes sampled longest ago go
			if m.Timestamp.Sub(v[len(v)-1].Timestamp) > cpuSampleTTL || len(c.series) >= maxCPUSamples {
				delete(c.series, k)
			}
		}
	}
	if len(ms) >= metricsKeep {
		ms = append(ms[:0], ms[len(ms)-metricsKeep+1:]...)
	}
	c.series[id] = append(ms, m)
}

// window is sandbox id's samples taken from start to metricsBucket after end
// (nil: unbounded), oldest first.
func (c *cpuSamples) window(id string, start, end *time.Time) []e2bapi.SandboxMetric {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []e2bapi.SandboxMetric{}
	for _, m := range c.series[id] {
		if (start == nil || !m.Timestamp.Before(*start)) && (end == nil || !m.Timestamp.After(end.Add(metricsBucket))) {
			out = append(out, m)
		}
	}
	return out
}

// percent records seconds (CPU time used at now) and returns the use since the
// previous reading (or since created) as a percentage of cores cores.
func (c *cpuSamples) percent(id string, now, created time.Time, seconds, cores float64) float64 {
	c.mu.Lock()
	prev, ok := c.last[id]
	if c.last == nil {
		c.last = map[string]cpuSample{}
	}
	if len(c.last) >= maxCPUSamples {
		for k, v := range c.last {
			if now.Sub(v.at) > cpuSampleTTL || len(c.last) >= maxCPUSamples {
				delete(c.last, k)
			}
		}
	}
	c.last[id] = cpuSample{at: now, seconds: seconds}
	c.mu.Unlock()
	if !ok || now.Sub(prev.at) > cpuSampleTTL || seconds < prev.seconds {
		prev = cpuSample{at: created}
	}
	wall := now.Sub(prev.at).Seconds()
	if wall <= 0 || cores <= 0 {
		return 0
	}
	pct := 100 * (seconds - prev.seconds) / (wall * cores)
	return math.Round(min(max(pct, 0), 100)*100) / 100
}

func (c *cpuSamples) forget(id string) {
	c.mu.Lock()
	delete(c.last, id)
	delete(c.series, id)
	c.mu.Unlock()
}

func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	sb, ok := h.lookup(w, r)
	if !ok {
		return
	}
	now := time.Now()
	q := r.URL.Query()
	start, err1 := unixParam(q.Get("start"))
	end, err2 := unixParam(q.Get("end"))
	if err1 != nil || err2 != nil {
		h.writeAPIError(w, r, http.StatusBadRequest, "start and end must be Unix times in seconds")
		return
	}
	if end != nil && end.Before(sb.CreatedAt.Truncate(time.Second)) {
		writeJSON(w, http.StatusOK, []e2bapi.SandboxMetric{})
		return
	}
	present := (start == nil || !start.After(now)) && (end == nil || !end.Add(metricsBucket).Before(now))
	if present && !h.cpu.fresh(sb.ID, now) {
		h.cpu.record(sb.ID, h.sample(r.Context(), sb, now))
	}
	writeJSON(w, http.StatusOK, h.cpu.window(sb.ID, start, end))
}

// unixParam parses an optional Unix time in seconds.
func unixParam(s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, err
	}
	t := time.Unix(n, 0)
	return &t, nil
}

// sample reads sb's use now.
func (h *Handler) sample(ctx context.Context, sb api.Sandbox, now time.Time) e2bapi.SandboxMetric {
	cores := sb.CPU
	m := e2bapi.SandboxMetric{Timestamp: now.UTC(), TimestampUnix: now.Unix(), MemTotal: sb.MemoryBytes,
		CpuCount: int32(max(math.Ceil(cores), 1))}
	aux := session.WithoutStep(ctx)
	if us, err := h.svc.SandboxUsage(aux, []string{sb.ID}); err == nil && len(us) == 1 {
		u := us[0]
		if u.MemoryLimitBytes > 0 {
			m.MemTotal = u.MemoryLimitBytes
		}
		if u.CPULimit > 0 {
			cores = u.CPULimit
			m.CpuCount = int32(max(math.Ceil(cores), 1))
		}
		m.MemUsed = max(u.MemoryBytes, 0)
		if u.CPUSeconds >= 0 {
			m.CpuUsedPct = float32(h.cpu.percent(sb.ID, now, sb.CreatedAt, u.CPUSeconds, cores))
		}
	}
	if sb.State == api.StateRunning {
		m.DiskUsed, m.DiskTotal = h.diskUse(aux, sb.ID)
	}
	return m
}

// diskUse is the used and total bytes of the sandbox's root file system
// (0, 0 when they cannot be read).
func (h *Handler) diskUse(ctx context.Context, sandbox string) (used, total int64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := h.svc.Exec(ctx, sandbox, api.ExecRequest{Cmd: []string{"stat", "-f", "-c", "%S %b %f", "/"}, User: "root", Cwd: "/"})
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
