package agent

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// The warm pool (Config.WarmPool = N > 0): the node keeps up to N sandboxes
// started ahead of the creates that take them. A create whose sandbox would be
// the same as a waiting one (the image names the same directories, the
// driver's spec is equal but for the ID) takes it and is answered without
// starting anything: its record gets the request's TTL, labels, request ID and
// start command, its creation time is the take's, and a network policy the
// request asks for is applied to it then.
//
// Which sandbox the pool holds: at first the node's default create (default
// backend, image and limits, no environment). A create that finds no match
// and has the same shape as the create that missed before it makes that shape
// the pool's: a steady workload (E2B's template, an SDK's fixed limits) is
// served after its second create, while creates of ever new shapes never turn
// the pool over. When the pool is full and holds sandboxes of another shape,
// the oldest of them makes room for one of the current shape.
//
// The pool fills one sandbox at a time and only on a quiet node: no create in
// flight, and no create, delete or exec begun or ended for warmQuiet. A start
// is work (about as much as a create); on a quiet node it takes CPU nobody
// asked for, so the creates, execs and deletes of a client with pauses between
// its calls do not compete with it, a burst takes what is ready and then
// creates as without a pool, and a node busy with calls back to back does not
// refill.
//
// Waiting sandboxes are not sandboxes yet: not listed, not counted against
// MaxSandboxes, and they never held a request's data. Close destroys them; a
// node killed with some has no record of them, and its drivers' Sweep
// releases them at its next start.

// PhaseWarm is the phase a create that took a warm sandbox spent taking it
// (observed instead of admission's and start's phases).
const PhaseWarm = "warm"

// warmQuiet is how long a node has begun and ended no create, delete or
// exec before the pool starts a sandbox.
const warmQuiet = 10 * time.Millisecond

// busy notes that a create, delete or exec begins or ends (the warm pool's
// quiet).
func (m *Manager) busy() {
	if m.warm != nil {
		m.lastOp.Store(time.Now().UnixNano())
	}
}

// quietFor is how much longer the node must stay quiet before the pool
// starts a sandbox (0 or less: it may now).
func (m *Manager) quietFor() time.Duration {
	return time.Duration(m.lastOp.Load() + int64(warmQuiet) - time.Now().UnixNano())
}

// warmFillTimeout bounds one pool member's start.
const warmFillTimeout = 2 * time.Minute

type warmPool struct {
	size int
	kick chan struct{} // buffered (1): look whether to fill

	mu    sync.Mutex
	ready []*warmMember // oldest first
	// shape is what the pool holds (nil: the node's default create); missed
	// is the shape of the last create that found no match.
	shape, missed *warmShape
}

// warmShape is a sandbox a pool member is started as (its spec without an ID).
type warmShape struct {
	drv  driver.Driver
	spec driver.Spec
}

// warmMember is a started sandbox no request has taken yet.
type warmMember struct {
	drv  driver.Driver
	spec driver.Spec
	inst driver.Instance
	// layers are the files of spec's layers when it started: an image
	// rebuilt or removed since (its directories replaced) does not hand out
	// a sandbox on the old ones.
	layers []fileID
}

// fileID names a file on its device.
type fileID struct{ dev, ino uint64 }

// layerFiles identifies the files of spec's layers.
func layerFiles(spec driver.Spec) ([]fileID, error) {
	out := make([]fileID, 0, len(spec.Layers))
	for _, l := range spec.Layers {
		var st unix.Stat_t
		if err := unix.Stat(l.Path, &st); err != nil {
			return nil, err
		}
		out = append(out, fileID{dev: st.Dev, ino: st.Ino})
	}
	return out, nil
}

// WarmPool reports the sandboxes waiting in the warm pool and its size (0, 0
// without a pool).
func (m *Manager) WarmPool() (waiting, size int) {
	w := m.warm
	if w == nil {
		return 0, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ready), w.size
}

func newWarmPool(size int) *warmPool {
	if size <= 0 {
		return nil
	}
	return &warmPool{size: size, kick: make(chan struct{}, 1)}
}

// wake asks the filler to look at the pool; it never blocks.
func (w *warmPool) wake() {
	if w == nil {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// work is what the filler should do now: evict, the oldest member of another
// shape when the pool is full; fill, whether to start one of the pool's shape.
func (w *warmPool) work() (evict *warmMember, fill bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ready) < w.size {
		return nil, true
	}
	if w.shape == nil {
		return nil, false
	}
	for i, x := range w.ready {
		if !x.is(w.shape) {
			w.ready = append(w.ready[:i], w.ready[i+1:]...)
			return x, true
		}
	}
	return nil, false
}

func (x *warmMember) is(s *warmShape) bool {
	return x.drv == s.drv && sameSandbox(x.spec, s.spec)
}

// defaultShape is the sandbox of the node's default create.
func (m *Manager) defaultShape(ctx context.Context) (*warmShape, error) {
	var req api.CreateSandboxRequest
	if err := validate(&req); err != nil {
		return nil, err
	}
	if err := m.validateQoS(&req); err != nil {
		return nil, err
	}
	drv, err := m.drivers.Get(m.drivers.Default())
	if err != nil {
		return nil, err
	}
	img, err := m.cfg.Images.ResolveContext(ctx, "")
	if err != nil {
		return nil, err
	}
	if img.Layered() {
		return nil, fmt.Errorf("the default image %q is a layered environment; the warm pool holds sandboxes of directory images only", img.Name)
	}
	return &warmShape{drv: drv, spec: specOf(req, img, "")}, nil
}

// warmLoop fills the pool on a quiet node, one sandbox at a time; a failed
// start waits for the next create before it is tried again.
func (m *Manager) warmLoop() {
	defer m.wg.Done()
	w := m.warm
	quiet := time.NewTimer(0)
	defer quiet.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-w.kick:
		}
		for m.creating.Load() == 0 {
			if d := m.quietFor(); d > 0 {
				quiet.Reset(d)
				select {
				case <-m.stop:
					return
				case <-quiet.C:
				}
				continue
			}
			if m.stopping() {
				return
			}
			evict, fill := w.work()
			if evict != nil {
				m.destroyWaiting(evict, "another shape makes room")
			}
			if !fill {
				break
			}
			if err := m.fillWarm(); err != nil {
				m.log.Warn("warm pool: could not start a sandbox; the pool fills again after the next create", "err", err)
				break
			}
		}
	}
}

func (m *Manager) fillWarm() error {
	ctx, cancel := context.WithTimeout(context.Background(), warmFillTimeout)
	defer cancel()
	m.warm.mu.Lock()
	shape := m.warm.shape
	m.warm.mu.Unlock()
	if shape == nil {
		var err error
		if shape, err = m.defaultShape(ctx); err != nil {
			return err
		}
	}
	spec := shape.spec
	spec.ID = m.newID()
	spec.Hostname = spec.ID
	layers, err := layerFiles(spec)
	if err != nil {
		return err
	}
	inst, err := shape.drv.Start(ctx, spec)
	if err != nil {
		return err
	}
	m.warm.mu.Lock()
	m.warm.ready = append(m.warm.ready, &warmMember{drv: shape.drv, spec: spec, inst: inst, layers: layers})
	m.warm.mu.Unlock()
	return nil
}

func (m *Manager) destroyWaiting(w *warmMember, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	m.log.Debug("warm pool: releasing a waiting sandbox", "id", w.spec.ID, "why", why)
	if err := w.inst.Destroy(ctx); err != nil {
		m.log.Warn("warm pool: release a waiting sandbox; the next agent start releases what is left", "id", w.spec.ID, "err", err)
	}
}

// takeWarm makes the sandbox req asks for from a waiting one whose spec is
// the one req's would be, in the place adm reserved. (nil, nil): none fits,
// the caller creates as usual.
func (m *Manager) takeWarm(ctx context.Context, req api.CreateSandboxRequest, img image.Image, adm *admission) (*sandbox, error) {
	if m.warm == nil || img.Layered() {
		return nil, nil
	}
	drv, err := m.drivers.Get(req.Backend)
	if err != nil {
		return nil, nil
	}
	t0 := time.Now()
	want := &warmShape{drv: drv, spec: specOf(req, img, "")}
	var layers []fileID // want's, read at the first member of its shape
	var statted bool
	var got *warmMember
	var dead []*warmMember
	m.warm.mu.Lock()
	keep := m.warm.ready[:0]
	for _, w := range m.warm.ready {
		match := w.is(want)
		if match && !statted {
			layers, _ = layerFiles(want.spec) // unreadable: no waiting sandbox matches
			statted = true
		}
		switch {
		case driver.Exited(w.inst) || (match && (layers == nil || !slices.Equal(w.layers, layers))):
			dead = append(dead, w)
		case got == nil && match && canTake(w, req):
			got = w
		default:
			keep = append(keep, w)
		}
	}
	m.warm.ready = keep
	if got == nil {
		if m.warm.missed != nil && m.warm.missed.drv == drv && sameSandbox(m.warm.missed.spec, want.spec) {
			m.warm.shape = want // the second create of this shape in a row
		}
		m.warm.missed = want
	}
	m.warm.mu.Unlock()
	for _, w := range dead {
		m.destroyWaiting(w, "its init ended, or its image's directories were replaced, while it waited")
	}
	if got == nil {
		return nil, nil
	}
	sb, err := m.adoptWarm(ctx, req, img, got, adm)
	if m.cfg.Observer != nil {
		m.cfg.Observer.Phase(req.Backend, PhaseWarm, time.Since(t0), err)
	}
	if err != nil {
		return nil, err
	}
	m.log.DebugContext(ctx, "created sandbox from the warm pool", "id", got.spec.ID, "image", img.Name)
	return sb, nil
}

// canTake: w's driver can give it what req asks for besides its spec.
func canTake(w *warmMember, req api.CreateSandboxRequest) bool {
	if canPauseAtDeadline(w.drv, req.OnExpiry) != nil {
		return false
	}
	if req.Network != nil {
		if _, ok := w.inst.(driver.Networker); !ok {
			return false
		}
	}
	return true
}

// adoptWarm applies req's network policy to the waiting sandbox w and makes
// it req's sandbox. A policy that cannot be applied destroys w.
func (m *Manager) adoptWarm(ctx context.Context, req api.CreateSandboxRequest, img image.Image, w *warmMember, adm *admission) (*sandbox, error) {
	if err := applyNetwork(ctx, w.inst, req.Network); err != nil {
		m.destroyWaiting(w, "its network policy failed")
		return nil, err
	}
	return m.adoptStarted(req, img, w.spec, w.drv, w.inst, adm)
}

// sameSandbox: a and b start the same sandbox but for its name.
func sameSandbox(a, b driver.Spec) bool {
	a.ID, a.Hostname, b.ID, b.Hostname = "", "", "", ""
	return reflect.DeepEqual(a, b)
}

// closeWarm destroys the pool's members (Close, after the filler stopped).
func (m *Manager) closeWarm() {
	if m.warm == nil {
		return
	}
	m.warm.mu.Lock()
	ready := m.warm.ready
	m.warm.ready = nil
	m.warm.mu.Unlock()
	for _, w := range ready {
		m.destroyWaiting(w, "the node stops")
	}
}
