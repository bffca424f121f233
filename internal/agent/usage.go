package agent

import (
	"time"

	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/driver"
	"github.com/dsec-dev/dsec/pkg/api"
)

// SandboxUse is one sandbox's resource use now (the dashboard's and dsec top's
// per-sandbox CPU and memory).
type SandboxUse struct {
	ID      string
	Backend string
	State   string
	// MemoryBytes is the memory charged now, -1 when the backend does not say;
	// MemoryLimit the sandbox's limit.
	MemoryBytes int64
	MemoryLimit int64
	// CPUTime is the CPU time its processes consumed so far, -1 when unknown;
	// CPULimit its limit in cores.
	CPUTime  time.Duration
	CPULimit float64
}

// cgrouped is an instance whose processes live in one cgroup (the container
// driver's).
type cgrouped interface{ Cgroup() *cgroups.Group }

// UsageOf reads the use of the sandboxes ids (unknown IDs are left out), or of
// every sandbox when ids is empty: one or two cgroup counters per running
// sandbox, no lock held across sandboxes.
func (m *Manager) UsageOf(ids []string) []SandboxUse {
	var sbs []*sandbox
	if len(ids) == 0 {
		sbs = m.all()
	} else {
		for _, id := range ids {
			if sb, err := m.get(id); err == nil {
				sbs = append(sbs, sb)
			}
		}
	}
	out := make([]SandboxUse, 0, len(sbs))
	for _, sb := range sbs {
		sb.mu.Lock()
		r, inst, deleted := sb.rec, sb.inst, sb.deleted
		u := SandboxUse{ID: r.ID, Backend: r.Backend, State: api.StateRunning, MemoryBytes: -1, MemoryLimit: r.Spec.Memory,
			CPUTime: -1, CPULimit: r.Spec.CPU}
		paused := r.Paused
		sb.mu.Unlock()
		if deleted {
			continue
		}
		switch {
		case driver.Exited(inst):
			u.State = api.StateExited
			out = append(out, u)
			continue
		case paused:
			u.State = api.StatePaused
		}
		if cg, ok := inst.(cgrouped); ok && cg.Cgroup() != nil {
			if n, err := cg.Cgroup().MemoryUsage(); err == nil {
				u.MemoryBytes = n
			}
			if d, err := cg.Cgroup().CPUUsage(); err == nil {
				u.CPUTime = d
			}
		} else if st, ok := inst.(driver.Stats); ok {
			if n, err := st.MemoryUsage(); err == nil {
				u.MemoryBytes = n
			}
		}
		out = append(out, u)
	}
	return out
}
