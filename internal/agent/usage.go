package agent

import (
	"context"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/pkg/api"
)

// cgrouped is an instance whose processes live in one cgroup (the container
// driver's): its CPU time is read there.
type cgrouped interface{ Cgroup() *cgroups.Group }

// Counters says which counters Usage reads; the others are reported as last
// read (-1 before any read).
type Counters uint8

const (
	// MemoryCounter: the memory charged (driver.Stats; one cgroup file for a
	// container, ~8 µs).
	MemoryCounter Counters = 1 << iota
	// CPUCounter: the CPU time used (a container's cgroup cpu.stat).
	CPUCounter
	// AllCounters reads both.
	AllCounters = MemoryCounter | CPUCounter
)

// Usage is the agent's one reader of its sandboxes' use (the metrics
// collector, the dashboard, dsec top and the node RPC all call it). It returns
// the sandboxes ids (unknown IDs are left out), or every sandbox when ids is
// empty.
//
// It never waits: a sandbox an operation holds (a delete, a pause, a reset) is
// reported as it was at the last look, counters included. It reads the
// counters c of each running or paused sandbox; with c 0 it reads no file
// (what a metrics scrape does).
func (m *Manager) Usage(ids []string, c Counters) []api.SandboxUsage {
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
		if u, ok := sb.usage(c); ok {
			out = append(out, u)
		}
	}
	return out
}

// SandboxUsage implements session.Resources: Usage with AllCounters.
func (m *Manager) SandboxUsage(_ context.Context, ids []string) ([]api.SandboxUsage, error) {
	return m.Usage(ids, AllCounters), nil
}

// usage is one sandbox's use (see Usage); false: it was deleted.
func (sb *sandbox) usage(c Counters) (api.SandboxUsage, bool) {
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
		last := sb.lastUsage.Load()
		u.MemoryBytes, u.CPUSeconds = last.MemoryBytes, last.CPUSeconds
		readCounters(inst, c, &u)
	}
	sb.lastUsage.Store(&u)
	return u, true
}

// readCounters reads inst's counters c into u (left as they are when the
// backend does not say).
func readCounters(inst driver.Instance, c Counters, u *api.SandboxUsage) {
	if st, ok := inst.(driver.Stats); ok && c&MemoryCounter != 0 {
		if n, err := st.MemoryUsage(); err == nil {
			u.MemoryBytes = n
		}
	}
	if cg, ok := inst.(cgrouped); ok && c&CPUCounter != 0 && cg.Cgroup() != nil {
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
