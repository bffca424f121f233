package e2b

import (
	"cmp"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// GET /sandboxes/{id}/metrics answers a series of samples, oldest first, as
// E2B's does. E2B samples every 5 s whether asked or not; dsec's node samples
// when asked, at most once per api.UsageSamplePeriod (5 s), and keeps each
// sandbox's last samples, so every API server answers the same series
// (session.Service.UsageHistory: CPU since the previous sample, memory and
// its limit, the root file system as df sees it inside the sandbox). A
// request whose ?start=&end= window (Unix seconds) reaches the present takes
// a sample unless the newest is younger than the period; the answer is the
// samples taken within the window (up to a period after its end).
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	sb, ok := h.lookup(w, r)
	if !ok {
		return
	}
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
	samples, err := h.svc.UsageHistory(session.WithoutStep(r.Context()), sb.ID, api.UsageHistoryRequest{Start: start, End: end})
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	out := make([]e2bapi.SandboxMetric, len(samples))
	for i, u := range samples {
		out[i] = e2bapi.SandboxMetric{Timestamp: u.At.UTC(), TimestampUnix: u.At.Unix(),
			CpuCount: int32(max(math.Ceil(cmp.Or(u.CPULimit, sb.CPU)), 1)), CpuUsedPct: float32(u.CPUPercent),
			MemUsed: u.MemoryBytes, MemTotal: cmp.Or(u.MemoryLimitBytes, sb.MemoryBytes),
			DiskUsed: u.DiskUsedBytes, DiskTotal: u.DiskTotalBytes}
	}
	writeJSON(w, http.StatusOK, out)
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
