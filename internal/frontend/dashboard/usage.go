package dashboard

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Usage limits.
const (
	MaxUsageIDs    = 200 // IDs per GET /ui/api/usage
	DefaultTopSize = 20
	MaxTopSize     = 1000
)

// Usage is one sandbox's resource use (GET /ui/api/usage and /ui/api/top),
// api.TopUsage.
type Usage = api.TopUsage

// UsageFunc reads sandboxes' use as session.Resources.SandboxUsage does.
type UsageFunc func(ctx context.Context, ids []string) ([]api.SandboxUsage, error)

// Top is the body of GET /ui/api/top, api.Top.
type Top = api.Top

// cpuSampler turns cumulative CPU times into a share of a core between two
// reads of the same sandbox.
type cpuSampler struct {
	mu   sync.Mutex
	last map[string]cpuSample
}

type cpuSample struct {
	cpu float64
	at  time.Time
}

// fill sets CPUPercent; a full read (all) forgets sandboxes no longer there.
func (s *cpuSampler) fill(us []Usage, now time.Time, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]cpuSample{}
	}
	seen := make(map[string]bool, len(us))
	for i := range us {
		u := &us[i]
		seen[u.ID] = true
		if u.CPUSeconds < 0 {
			continue
		}
		if prev, ok := s.last[u.ID]; ok {
			if dt := now.Sub(prev.at).Seconds(); dt > 0 && u.CPUSeconds >= prev.cpu {
				p := 100 * (u.CPUSeconds - prev.cpu) / dt
				u.CPUPercent = &p
			}
		}
		s.last[u.ID] = cpuSample{cpu: u.CPUSeconds, at: now}
	}
	if all {
		for id := range s.last {
			if !seen[id] {
				delete(s.last, id)
			}
		}
	}
}

func (h *Handler) readUsage(ctx context.Context, ids []string) ([]Usage, error) {
	if h.opts.Usage == nil {
		return nil, errdefs.New(api.CodeNotImplemented, "this server does not report sandbox usage")
	}
	read, err := h.opts.Usage(ctx, ids)
	if err != nil {
		return nil, err
	}
	us := make([]Usage, len(read))
	for i, u := range read {
		us[i].SandboxUsage = u
	}
	h.cpu.fill(us, time.Now(), len(ids) == 0)
	return us, nil
}

// usage handles GET /ui/api/usage?id=A&id=B: the use of one page of sandboxes.
func (h *Handler) usage(w http.ResponseWriter, r *http.Request) {
	ids := r.URL.Query()["id"]
	if len(ids) == 0 || len(ids) > MaxUsageIDs {
		writeError(w, errdefs.Invalid("give 1 to %d id parameters, got %d", MaxUsageIDs, len(ids)))
		return
	}
	us, err := h.readUsage(r.Context(), ids)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]Usage{"sandboxes": us})
}

// top handles GET /ui/api/top?limit=N&sort=cpu|memory.
func (h *Handler) top(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := DefaultTopSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTopSize {
			writeError(w, errdefs.Invalid("limit must be an integer from 1 to %d, got %q", MaxTopSize, v))
			return
		}
		limit = n
	}
	by := q.Get("sort")
	switch by {
	case "":
		by = "cpu"
	case "cpu", "memory":
	default:
		writeError(w, errdefs.Invalid("sort must be cpu or memory, got %q", by))
		return
	}
	ov, err := h.buildOverview(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	us, err := h.readUsage(r.Context(), nil)
	if err != nil {
		writeError(w, err)
		return
	}
	sortUsage(us, by)
	if len(us) > limit {
		us = us[:limit]
	}
	writeJSON(w, http.StatusOK, Top{GeneratedAt: ov.GeneratedAt, Nodes: ov.Nodes, Sandboxes: ov.Sandboxes, Busiest: us, SortBy: by})
}

// sortUsage orders by CPU share then memory ("cpu") or by memory ("memory"),
// busiest first, then by ID.
func sortUsage(us []Usage, by string) {
	cpu := func(u Usage) float64 {
		if u.CPUPercent == nil {
			return -1
		}
		return *u.CPUPercent
	}
	sort.Slice(us, func(i, j int) bool {
		a, b := us[i], us[j]
		if by == "cpu" && cpu(a) != cpu(b) {
			return cpu(a) > cpu(b)
		}
		if a.MemoryBytes != b.MemoryBytes {
			return a.MemoryBytes > b.MemoryBytes
		}
		return a.ID < b.ID
	})
}
