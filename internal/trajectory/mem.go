package trajectory

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Mem is an in-memory Store (tests, and nodes that need no durability).
type Mem struct {
	mu   sync.Mutex
	boot string
	t    map[string]*memTraj
}

type memTraj struct {
	meta  Meta
	steps map[int]*Step
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty in-memory store.
func NewMem() *Mem { return &Mem{boot: NewBoot(), t: map[string]*memTraj{}} }

// Restart simulates a server restart: steps in flight become unknown.
func (m *Mem) Restart() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.boot = NewBoot()
}

func cloneStep(s *Step) *Step {
	c := *s
	c.Input = slices.Clone(s.Input)
	c.Args = slices.Clone(s.Args)
	if s.Result != nil {
		r := *s.Result
		r.Body = slices.Clone(s.Result.Body)
		c.Result = &r
	}
	return &c
}

func cloneMeta(m Meta) Meta {
	m.Sandboxes = slices.Clone(m.Sandboxes)
	return m
}

// Begin implements Store.
func (m *Mem) Begin(_ context.Context, req BeginRequest) (Decision, error) {
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.t[req.Trajectory]
	var meta *Meta
	var cur *Step
	if t != nil {
		meta, cur = &t.meta, t.steps[req.N]
	}
	replay, live, err := Decide(meta, cur, req, m.boot)
	if err != nil || !live {
		if replay != nil {
			replay = cloneStep(replay)
		}
		return Decision{Replay: replay}, err
	}
	var dec Decision
	if t == nil {
		t = &memTraj{steps: map[int]*Step{}}
		m.t[req.Trajectory] = t
	}
	var nm *Meta
	nm, dec.New = startMeta(meta, req)
	t.meta = *nm
	s := startedStep(req, m.boot)
	if !req.InputStored {
		s.Input = nil
	}
	t.steps[req.N] = cloneStep(s)
	return dec, nil
}

// Finish implements Store.
func (m *Mem) Finish(_ context.Context, traj string, n int, res Result, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.t[traj]
	if t == nil || !finishable(t.steps[n], m.boot) {
		return notStarted(traj, n)
	}
	s := t.steps[n]
	s.Result.Body = slices.Clone(finishStep(s, res, now))
	return nil
}

// Abort implements Store.
func (m *Mem) Abort(_ context.Context, traj string, n int, mode AbortMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.t[traj]
	if t == nil || !abortable(t.steps[n]) {
		return notStarted(traj, n)
	}
	if mode == MarkUnknown {
		t.steps[n].State = api.StepUnknown
		return nil
	}
	delete(t.steps, n)
	if gone, _ := rollbackMeta(&t.meta, n, func() (int, error) {
		last := 0
		for k := range t.steps {
			last = max(last, k)
		}
		return last, nil
	}); gone {
		delete(m.t, traj)
	}
	return nil
}

// Get implements Store.
func (m *Mem) Get(_ context.Context, traj string) (Meta, []Step, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.t[traj]
	if t == nil {
		return Meta{}, nil, notFound(traj)
	}
	steps := make([]Step, 0, len(t.steps))
	for _, s := range t.steps {
		c := cloneStep(s)
		c.State = EffectiveState(c, m.boot)
		steps = append(steps, *c)
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i].N < steps[j].N })
	return cloneMeta(t.meta), steps, nil
}

// List implements Store.
func (m *Mem) List(context.Context) ([]Meta, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Meta, 0, len(m.t))
	for _, t := range m.t {
		out = append(out, cloneMeta(t.meta))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Delete implements Store.
func (m *Mem) Delete(_ context.Context, traj string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.t[traj] == nil {
		return notFound(traj)
	}
	delete(m.t, traj)
	return nil
}

// Rebind implements Store.
func (m *Mem) Rebind(_ context.Context, traj, sandboxID string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.t[traj]
	if t == nil {
		return notFound(traj)
	}
	rebind(&t.meta, sandboxID, now)
	return nil
}

// Tally implements Store.
func (m *Mem) Tally(_ context.Context, traj string, t Tally) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if tr := m.t[traj]; tr != nil {
		tally(&tr.meta, t)
	}
	return nil
}

// Prune implements Store.
func (m *Mem) Prune(ctx context.Context, olderThan time.Time, maxN int) (int, error) {
	metas, _ := m.List(ctx)
	victims := pruneVictims(metas, olderThan, maxN)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range victims {
		delete(m.t, id)
	}
	return len(victims), nil
}

// Close implements Store.
func (m *Mem) Close() error { return nil }
