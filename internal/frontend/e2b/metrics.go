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

// GET /sandboxes/{id}/metrics answers one sample taken when it is asked (E2B
// keeps a series sampled every 5 s; dsec reads the node's counters instead):
// CPU use since this API server's previous sample of the sandbox (since its
// creation for the first), memory charged and its limit (session's
// SandboxUsage), and the disk as df sees it inside the sandbox (statfs of /
// through `stat -f`; 0 when the sandbox cannot run it, e.g. while paused).
// The sample is in the answer when the ?start=&end= window (Unix seconds)
// holds the moment it was taken, within metricsBucket of the end, E2B's
// sampling period.

const (
	metricsBucket = 5 * time.Second
	// cpuSampleTTL: an older previous sample is not used for a CPU delta.
	cpuSampleTTL = 5 * time.Minute
	// maxCPUSamples bounds the samples kept (the oldest go first).
	maxCPUSamples = 10_000
)

// cpuSample is a sandbox's CPU time at one moment.
type cpuSample struct {
	at      time.Time
	seconds float64
}

// cpuSamples keeps each sandbox's last CPU reading (its zero value is ready).
type cpuSamples struct {
	mu   sync.Mutex
	last map[string]cpuSample
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
	if (start != nil && start.After(now)) || (end != nil && end.Add(metricsBucket).Before(now)) ||
		(end != nil && end.Before(sb.CreatedAt.Truncate(time.Second))) {
		writeJSON(w, http.StatusOK, []e2bapi.SandboxMetric{})
		return
	}
	writeJSON(w, http.StatusOK, []e2bapi.SandboxMetric{h.sample(r.Context(), sb, now)})
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
