package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/reclaim"
	"github.com/dsec-dev/dsec/pkg/api"
)

// QoSConfig configures CPU classes and memory reclaim on this node.
type QoSConfig struct {
	// DefaultCPUClass applies to creates naming none ("" means "ls").
	DefaultCPUClass string
	// IdleReclaimAfter pages out the memory of sandboxes idle this long (no
	// session operation); 0 turns idle reclaim off.
	IdleReclaimAfter time.Duration
	// IdleReclaimEvery is how often idle sandboxes are looked for (default a
	// quarter of IdleReclaimAfter, between 50ms and 30s).
	IdleReclaimEvery time.Duration
	// IdleReclaimPause is the throttle between two sandboxes' page-outs
	// (default 100ms).
	IdleReclaimPause time.Duration
	// Swap names the swap device the node owns and SwapBytes its size (Info).
	Swap      string
	SwapBytes int64
	// DAMON, when set, selects cold memory for idle reclaim with a kdamond
	// dsec owns; DAMONNote says why there is none.
	DAMON     *reclaim.DAMON
	DAMONNote string
}

func (c QoSConfig) defaultClass() string {
	if c.DefaultCPUClass == "" {
		return api.CPUClassLS
	}
	return c.DefaultCPUClass
}

// CheckCPUClass rejects anything but "ls" and "be".
func CheckCPUClass(class string) error {
	if class != api.CPUClassLS && class != api.CPUClassBE {
		return errdefs.Invalid("cpu_class %q: must be %q (latency-sensitive) or %q (best-effort)", class, api.CPUClassLS, api.CPUClassBE)
	}
	return nil
}

func (m *Manager) validateQoS(req *api.CreateSandboxRequest) error {
	if req.CPUClass == "" {
		req.CPUClass = m.cfg.QoS.defaultClass()
	}
	return CheckCPUClass(req.CPUClass)
}

func cpuClassOf(s driver.Spec) string {
	if s.CPUClass == "" {
		return api.CPUClassLS
	}
	return s.CPUClass
}

func (m *Manager) qosInfo() *api.QoSInfo {
	q := &api.QoSInfo{
		DefaultCPUClass: m.cfg.QoS.defaultClass(), Swap: m.cfg.QoS.Swap, SwapBytes: m.cfg.QoS.SwapBytes,
		IdleReclaimAfterSeconds: m.cfg.QoS.IdleReclaimAfter.Seconds(),
		DAMON:                   m.cfg.QoS.DAMON != nil, DAMONNote: m.cfg.QoS.DAMONNote,
	}
	if cs, ok := m.cfg.Driver.(interface{ CoreScheduling() bool }); ok {
		q.CoreScheduling = cs.CoreScheduling()
	}
	return q
}

// withCapability runs op on sandbox id's instance as capability C (a driver
// interface) under the sandbox's lock and saves the record after a successful
// op. A backend without C gets missing(backend); an exited sandbox
// sandbox_gone. Nothing changes when it fails before op.
func withCapability[C any](m *Manager, id string, missing func(backend string) error, op func(sb *sandbox, c C) error) (*sandbox, error) {
	sb, err := m.get(id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	c, ok := sb.inst.(C)
	switch {
	case !ok:
		err = missing(sb.rec.Backend)
	case driver.Exited(sb.inst):
		err = errdefs.New(api.CodeSandboxGone, "sandbox %s has exited", id)
	default:
		if err = op(sb, c); err == nil {
			err = sb.save()
		}
	}
	sb.mu.Unlock()
	if ok {
		sb.touch()
	}
	return sb, err
}

// SetCPUClass changes a running sandbox's CPU class (PUT .../cpu-class).
func (m *Manager) SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error) {
	if err := CheckCPUClass(class); err != nil {
		return api.Sandbox{}, err
	}
	sb, err := withCapability(m, id, func(b string) error { return errdefs.Invalid("backend %q has no CPU classes", b) },
		func(sb *sandbox, c driver.CPUClasser) error {
			if err := c.SetCPUClass(ctx, class); err != nil {
				return err
			}
			sb.rec.Spec.CPUClass = class
			return nil
		})
	if err != nil {
		return api.Sandbox{}, err
	}
	return sb.view(), nil
}

// pauseReclaimer is an instance that can pause and reclaim.
type pauseReclaimer interface {
	driver.Pauser
	driver.Reclaimer
}

// PauseWith pauses a sandbox; with req.Reclaim it then pushes the frozen
// sandbox's memory out and the answer says what moved. A backend without the
// reclaim capability is refused before anything changes.
func (m *Manager) PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error) {
	if req.Memory != nil && !*req.Memory {
		if req.Reclaim {
			return api.PauseResponse{}, errdefs.Invalid("reclaim is for a pause with memory; a pause without memory frees it all")
		}
		sbx, err := m.pauseFilesystem(ctx, id)
		return api.PauseResponse{Sandbox: sbx}, err
	}
	if !req.Reclaim {
		sbx, err := m.Pause(ctx, id)
		return api.PauseResponse{Sandbox: sbx}, err
	}
	var res api.ReclaimResult
	sb, err := withCapability(m, id, func(b string) error {
		return errdefs.Invalid("backend %q cannot reclaim a paused sandbox's memory; pause without reclaim", b)
	}, func(sb *sandbox, p pauseReclaimer) error {
		if !sb.rec.Paused {
			if err := p.Pause(ctx); err != nil {
				return err
			}
			sb.rec.Paused = true
		}
		var err error
		if res, err = p.Reclaim(ctx); err != nil {
			_ = sb.save() // paused, not reclaimed
			return err
		}
		sb.rec.Reclaimed = true
		return nil
	})
	if err != nil {
		return api.PauseResponse{}, err
	}
	m.reclaimed("pause", res.SwappedBytes+res.PageCacheDroppedBytes)
	m.log.Debug("paused with reclaim", "id", id, "swapped", res.SwappedBytes, "cache_dropped", res.PageCacheDroppedBytes, "note", res.Note)
	return api.PauseResponse{Sandbox: sb.view(), Reclaim: &res}, nil
}

// resume prefetches reclaimed memory, then thaws, then re-attaches background
// processes of a sandbox re-adopted while paused (sb.mu held).
func (sb *sandbox) resume(ctx context.Context, p driver.Pauser) error {
	if r, ok := sb.inst.(driver.Reclaimer); ok && sb.rec.Reclaimed {
		if err := r.Prefetch(ctx); err != nil {
			// Not fatal: the pages come back on first touch instead.
			sb.m.log.Warn("prefetch before resume", "id", sb.rec.ID, "err", err)
		}
	}
	if err := p.Resume(ctx); err != nil {
		return err
	}
	sb.rec.Reclaimed = false
	if sb.reattachPending {
		sb.reattachPending = false
		sb.reattachProcs()
	}
	return nil
}

// idleReclaim remembers, per sandbox, the activity stamp its memory was paged
// out at, so a sandbox is paged out once per idle period.
type idleReclaim struct {
	mu       sync.Mutex
	pagedOut map[string]int64
}

func (m *Manager) startIdleReclaim() {
	if m.cfg.QoS.IdleReclaimAfter <= 0 {
		return
	}
	m.idle.pagedOut = map[string]int64{}
	every := m.cfg.QoS.IdleReclaimEvery
	if every <= 0 {
		every = min(max(m.cfg.QoS.IdleReclaimAfter/4, 50*time.Millisecond), 30*time.Second)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				if m.cfg.QoS.DAMON != nil {
					_ = m.cfg.QoS.DAMON.Stop()
				}
				return
			case <-t.C:
				m.idleReclaimOnce(context.Background())
			}
		}
	}()
}

// idleReclaimOnce pages out sandboxes idle for IdleReclaimAfter, one at a time
// with IdleReclaimPause between them; with DAMON it hands their processes to
// the kdamond instead, whose pageout scheme picks cold regions under its quota.
func (m *Manager) idleReclaimOnce(ctx context.Context) {
	m.mu.RLock()
	sbs := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		sbs = append(sbs, sb)
	}
	m.mu.RUnlock()
	m.idle.mu.Lock()
	for id := range m.idle.pagedOut {
		if !slices.ContainsFunc(sbs, func(sb *sandbox) bool { return sb.rec.ID == id }) {
			delete(m.idle.pagedOut, id) // deleted since
		}
	}
	m.idle.mu.Unlock()
	cutoff := m.now().Add(-m.cfg.QoS.IdleReclaimAfter).UnixNano()
	pause := m.cfg.QoS.IdleReclaimPause
	if pause == 0 {
		pause = 100 * time.Millisecond
	}
	var damonPids []int
	for _, sb := range sbs {
		last := sb.lastActive.Load()
		if last > cutoff {
			continue
		}
		r, ok := sb.inst.(driver.Reclaimer)
		sb.mu.Lock()
		skip := !ok || sb.deleted || sb.rec.Paused || driver.Exited(sb.inst)
		sb.mu.Unlock()
		if skip {
			continue
		}
		if m.cfg.QoS.DAMON != nil {
			if pids, err := r.Pids(); err == nil {
				damonPids = append(damonPids, pids...)
			}
			continue
		}
		m.idle.mu.Lock()
		done := m.idle.pagedOut[sb.rec.ID] == last
		m.idle.mu.Unlock()
		if done {
			continue
		}
		n, err := r.PageOutCold(ctx)
		if err != nil {
			m.log.Warn("idle reclaim", "id", sb.rec.ID, "err", err)
			continue
		}
		m.reclaimed("idle", n)
		m.idle.mu.Lock()
		m.idle.pagedOut[sb.rec.ID] = last
		m.idle.mu.Unlock()
		m.log.Debug("idle reclaim", "id", sb.rec.ID, "advised_bytes", n)
		select {
		case <-m.stop:
			return
		case <-time.After(pause):
		}
	}
	if m.cfg.QoS.DAMON != nil {
		if err := m.cfg.QoS.DAMON.Apply(damonPids); err != nil {
			m.log.Warn("idle reclaim: damon", "err", err)
		}
	}
}
