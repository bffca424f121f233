package agent

import (
	"context"

	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/driver"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

var _ session.UsageReader = (*Manager)(nil)

// cgrouped is an instance whose processes live in one cgroup (the container
// driver's): its CPU time is read there.
type cgrouped interface{ Cgroup() *cgroups.Group }

// Usage is the agent's one reader of its sandboxes' use (the metrics
// collector, the dashboard, dsec top and the node RPC all call it). It returns
// the sandboxes ids (unknown IDs are left out), or every sandbox when ids is
// empty.
//
// It never waits: a sandbox an operation holds (a delete, a pause, a reset) is
// reported as it was at the last look, counters included. With counters it
// reads each running or paused sandbox's memory (driver.Stats) and CPU time (its
// cgroup): one or two files, ~8 µs each. Without, it reads no file and reports
// the counters of the last read (-1 before any).
func (m *Manager) Usage(ids []string, counters bool) []api.SandboxUsage {
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
	out := make([]api.SandboxUsage, 0, len(sbs))
	for _, sb := range sbs {
		if u, ok := sb.usage(counters); ok {
			out = append(out, u)
		}
	}
	return out
}

// SandboxUsage implements session.UsageReader: Usage with counters.
func (m *Manager) SandboxUsage(_ context.Context, ids []string) ([]api.SandboxUsage, error) {
	return m.Usage(ids, true), nil
}

// usage is one sandbox's use (see Usage); false: it was deleted.
func (sb *sandbox) usage(counters bool) (api.SandboxUsage, bool) {
	if !sb.mu.TryLock() {
		return *sb.lastUsage.Load(), true
	}
	r, inst, deleted := sb.rec, sb.inst, sb.deleted
	u := api.SandboxUsage{ID: r.ID, Backend: r.Backend, State: api.StateRunning,
		MemoryLimitBytes: r.Spec.Memory, CPULimit: r.Spec.CPU, MemoryBytes: -1, CPUSeconds: -1}
	paused := r.Paused
	sb.mu.Unlock()
	switch {
	case deleted:
		return u, false
	case driver.Exited(inst):
		u.State = api.StateExited
	case paused:
		u.State = api.StatePaused
	}
	if u.State != api.StateExited {
		if counters {
			readCounters(inst, &u)
		} else {
			last := sb.lastUsage.Load()
			u.MemoryBytes, u.CPUSeconds = last.MemoryBytes, last.CPUSeconds
		}
	}
	sb.lastUsage.Store(&u)
	return u, true
}

// readCounters reads inst's memory and CPU time into u (left -1 when the
// backend does not say).
func readCounters(inst driver.Instance, u *api.SandboxUsage) {
	if st, ok := inst.(driver.Stats); ok {
		if n, err := st.MemoryUsage(); err == nil {
			u.MemoryBytes = n
		}
	}
	if cg, ok := inst.(cgrouped); ok && cg.Cgroup() != nil {
		if d, err := cg.Cgroup().CPUUsage(); err == nil {
			u.CPUSeconds = d.Seconds()
		}
	}
}

// firstUsage is a new sandbox's usage before any look: what Usage reports if
// an operation holds it at the first look.
func firstUsage(r *record) *api.SandboxUsage {
	u := &api.SandboxUsage{ID: r.ID, Backend: r.Backend, State: api.StateRunning,
		MemoryLimitBytes: r.Spec.Memory, CPULimit: r.Spec.CPU, MemoryBytes: -1, CPUSeconds: -1}
	if r.Paused {
		u.State = api.StatePaused
	}
	return u
}
