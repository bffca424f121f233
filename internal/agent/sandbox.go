package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/pkg/api"
)

// sandbox is the agent's view of one sandbox.
type sandbox struct {
	m          *Manager
	drv        driver.Driver                    // the backend's driver (rec.Backend)
	lastActive atomic.Int64                     // unix nanos
	lastUsage  atomic.Pointer[api.SandboxUsage] // Usage's last look (usage.go); never nil
	hist       usageHistory                     // usage samples (usagehistory.go)

	mu      sync.Mutex // guards rec, inst, procs; held across pause/resume/reset
	rec     *record
	inst    driver.Instance
	procs   map[string]*bgProc
	watches map[string]*dirWatch // watch.go
	deleted bool
	// tornDown is closed when a deleted sandbox's teardown ended
	// (teardown.go).
	tornDown    chan struct{}
	teardownErr error // the driver's Destroy's, set before tornDown closes
	// reattachPending: re-adopted while paused; its background processes are
	// re-attached on resume (a frozen init cannot answer).
	reattachPending bool
	// journaled: the process journal may hold lines (procjournal.go); the
	// next save empties it.
	journaled bool
}

func newSandbox(m *Manager, drv driver.Driver, r *record, inst driver.Instance) *sandbox {
	sb := &sandbox{m: m, drv: drv, rec: r, inst: inst, procs: map[string]*bgProc{}}
	sb.lastActive.Store(m.now().UnixNano())
	sb.lastUsage.Store(firstUsage(r))
	return sb
}

func (sb *sandbox) touch() { sb.lastActive.Store(sb.m.now().UnixNano()) }

func (sb *sandbox) view() api.Sandbox {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	r := sb.rec
	v := api.Sandbox{
		ID: r.ID, Backend: r.Backend, Image: r.Image, ImageRef: r.ImageRef, ImageDigest: r.ImageDigest, State: api.StateRunning,
		CPU: r.Spec.CPU, MemoryBytes: r.Spec.Memory, DiskBytes: r.Spec.Disk, PidsMax: r.Spec.PidsMax,
		CreatedAt: r.CreatedAt, IdleTimeoutSeconds: r.IdleTimeoutSeconds,
		LastActiveAt: time.Unix(0, sb.lastActive.Load()).UTC(),
		Env:          r.Env, Labels: r.Labels, RequestID: r.RequestID,
		CPUClass: cpuClassOf(r.Spec), Reclaimed: r.Reclaimed, KSM: r.Spec.KSM,
		AllowSetuid: r.Spec.AllowSetuid,
	}
	if t, ok := r.deadline(); ok {
		v.ExpiresAt, v.OnExpiry = &t, r.onExpiry()
	}
	if r.Start != nil {
		st := *r.Start
		v.Start = &st
	}
	v.Network = networkStatus(sb.inst, sb.m.log)
	if vm, ok := sb.inst.(interface{ VMAccel() *api.VMAccel }); ok {
		v.VM = vm.VMAccel()
	}
	if _, ok := sb.inst.(driver.Screenshotter); ok && sb.drv.Capabilities().Screenshot {
		v.Screen = true
	}
	switch {
	case driver.Exited(sb.inst):
		v.State = api.StateExited
	case r.Paused:
		v.State = api.StatePaused
	}
	return v
}

func (sb *sandbox) save() error {
	sb.rec.DriverState = sb.inst.State()
	if err := saveRecord(sb.m.recs, sb.rec); err != nil {
		return errdefs.Internal(err, "save sandbox record")
	}
	if sb.journaled {
		if err := sb.m.clearProcJournal(sb.rec.ID); err != nil {
			return err
		}
		sb.journaled = false
	}
	return nil
}

// The smallest sandbox a node runs.
const (
	minMemoryBytes = 4 << 20
	minDiskBytes   = 1 << 20
)

// validate checks what a node can run of a create request (the session
// chain's interceptor, session.Validating, checked its form) and fills its
// defaults.
func validate(req *api.CreateSandboxRequest) error {
	switch {
	case req.MemoryBytes != 0 && req.MemoryBytes < minMemoryBytes:
		return errdefs.Invalid("memory_bytes must be at least %d (4 MiB), got %d", minMemoryBytes, req.MemoryBytes)
	case req.DiskBytes != 0 && req.DiskBytes < minDiskBytes:
		return errdefs.Invalid("disk_bytes must be at least %d (1 MiB), got %d", minDiskBytes, req.DiskBytes)
	}
	if req.CPU == 0 {
		req.CPU = DefaultCPU
	}
	if req.MemoryBytes == 0 {
		req.MemoryBytes = DefaultMemory
	}
	if req.DiskBytes == 0 {
		req.DiskBytes = DefaultDisk
	}
	if req.PidsMax == 0 {
		req.PidsMax = DefaultPidsMax
	}
	return nil
}

// Create implements session.Service.
func (m *Manager) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	m.busy()
	m.creating.Add(1)
	defer func() {
		m.busy()
		if m.creating.Add(-1) == 0 {
			m.warm.wake()
		}
	}()
	if err := validate(&req); err != nil {
		return api.Sandbox{}, err
	}
	if err := m.validateQoS(&req); err != nil {
		return api.Sandbox{}, err
	}
	// A cluster's API server places by node and labels and forwards neither; a
	// request that still names them came straight to this node.
	if req.Node != "" && req.Node != m.cfg.Node {
		return api.Sandbox{}, errdefs.Invalid("node %q: this is node %q (a single-node server has no other)", req.Node, m.cfg.Node)
	}
	if len(req.Constraints) > 0 {
		return api.Sandbox{}, errdefs.Invalid("label constraints need a cluster (dsec apiserver); this node has no labels")
	}
	if req.Backend == "" {
		req.Backend = m.drivers.Default()
	}
	if _, err := m.drivers.Get(req.Backend); err != nil {
		return api.Sandbox{}, err
	}
	if err := m.checkNetwork(req.Backend, req.Network); err != nil {
		return api.Sandbox{}, err
	}
	ctx, end := m.span(ctx, "agent.create", req.Backend)
	var sb api.Sandbox
	var err error
	if m.needsPull(req) {
		sb, err = m.createPulling(ctx, req)
	} else {
		sb, err = m.createIdempotent(ctx, req)
	}
	end(err)
	return sb, err
}

// createIdempotent creates, or with a request ID returns the sandbox the first
// create with that ID made.
func (m *Manager) createIdempotent(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if req.RequestID == "" {
		sb, err := m.create(ctx, req)
		if err != nil {
			return api.Sandbox{}, err
		}
		if err := m.start(ctx, sb, req); err != nil {
			return api.Sandbox{}, err
		}
		return sb.view(), nil
	}
	// Idempotent create: the first request with an ID creates, every other waits
	// for it and returns the same sandbox.
	m.mu.Lock()
	p, seen := m.byRequest[req.RequestID]
	if !seen {
		p = &pending{done: make(chan struct{})}
		m.byRequest[req.RequestID] = p
	}
	m.mu.Unlock()
	if seen {
		return m.awaitRequest(ctx, req.RequestID, p)
	}
	sb, err := m.create(ctx, req)
	if err == nil {
		// A start that fails keeps the sandbox: a retry gets the same answer.
		err = m.start(ctx, sb, req)
	}
	m.mu.Lock()
	if sb != nil {
		p.id = sb.rec.ID
	}
	if err != nil {
		p.err = err
		if sb == nil {
			delete(m.byRequest, req.RequestID) // a retry may try again
		}
	}
	m.mu.Unlock()
	close(p.done)
	if err != nil {
		return api.Sandbox{}, err
	}
	return sb.view(), nil
}

// awaitRequest answers a create whose request ID p's create took: the
// sandbox it made, once it is made.
func (m *Manager) awaitRequest(ctx context.Context, requestID string, p *pending) (api.Sandbox, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return api.Sandbox{}, errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "waiting for the create with request_id %q", requestID)
	}
	if p.err != nil {
		return api.Sandbox{}, p.err
	}
	return m.Get(ctx, p.id)
}

func (m *Manager) create(ctx context.Context, req api.CreateSandboxRequest) (*sandbox, error) {
	// Admission first: a create over the limit costs no image lookup either.
	adm, err := m.admit(1)
	if err != nil {
		return nil, m.refusedAdmission(ctx, req.Backend, err)
	}
	defer adm[0].release()
	img, err := m.cfg.Images.ResolveContext(registry.WithAuth(ctx, req.RegistryAuth), req.Image)
	if err != nil {
		return nil, err
	}
	if err := checkEntrypoint(req, img); err != nil {
		return nil, err
	}
	if sb, err := m.takeWarm(ctx, req, img, adm[0]); sb != nil || err != nil {
		return sb, err
	}
	return m.createOn(ctx, req, img, nil, adm[0])
}

// createOn creates a sandbox on img with extra directory layers stacked on top
// of img's (a fork's snapshot of its parent's writable layer).
// adm is the place admission reserved for it; nil: createOn admits it itself.
func (m *Manager) createOn(ctx context.Context, req api.CreateSandboxRequest, img image.Image, top []image.Layer, adm *admission) (*sandbox, error) {
	return m.createOnID(ctx, req, img, top, adm, m.newID())
}

// createOnID is createOn making sandbox id.
func (m *Manager) createOnID(ctx context.Context, req api.CreateSandboxRequest, img image.Image, top []image.Layer, adm *admission, id string) (*sandbox, error) {
	adm, err := m.admitPhase(ctx, req.Backend, adm)
	if err != nil {
		return nil, err
	}
	defer adm.release()
	defer m.slots.Release(1)
	if img.Layered() {
		// A layered environment: layerd mounts its layers (once per node) and holds
		// them for this sandbox until Delete.
		mctx, end := m.phase(ctx, req.Backend, PhaseImageMount, "agent.image_mount")
		err := m.cfg.Images.Mount(mctx, &img, id)
		end(err)
		if err != nil {
			return nil, err
		}
		img.Layers = append(img.Layers, top...)
		started := false
		sb, err := m.startSandbox(ctx, req, img, id, adm, &started)
		if !started {
			// Nothing holds the layers: release them (layerd unmounts after its grace).
			_ = m.cfg.Images.Unmount(context.Background(), id)
		}
		return sb, err
	}
	img.Layers = append(img.Layers, top...)
	return m.startSandbox(ctx, req, img, id, adm, nil)
}

// admitPhase is the admission phase: the place under the node's sandbox limit
// (reserved here unless the caller did, as create and fork do before any other
// work) and then a create slot (the caller releases it). A refusal is observed
// as the phase's error.
func (m *Manager) admitPhase(ctx context.Context, backend string, adm *admission) (_ *admission, err error) {
	ctx, end := m.phase(ctx, backend, PhaseAdmission, "agent.admission")
	defer func() { end(err) }()
	if adm == nil {
		a, err := m.admit(1)
		if err != nil {
			return nil, err
		}
		adm = a[0]
	}
	if err := m.slots.Acquire(ctx, 1); err != nil {
		adm.release()
		return nil, errdefs.Wrap(api.CodeDeadlineExceeded, err, "waiting for a create slot")
	}
	return adm, nil
}

// refusedAdmission observes a create refused before createOn (by create's early
// reservation) as a failed admission phase.
func (m *Manager) refusedAdmission(ctx context.Context, backend string, err error) error {
	_, end := m.phase(ctx, backend, PhaseAdmission, "agent.admission")
	end(err)
	return err
}

// startSandbox starts the sandbox on resolved lower directories; *started is set
// once it exists (so the caller keeps the layers it acquired).
func (m *Manager) startSandbox(ctx context.Context, req api.CreateSandboxRequest, img image.Image, id string, adm *admission, started *bool) (*sandbox, error) {
	spec := specOf(req, img, id)
	drv, err := m.drivers.Get(req.Backend)
	if err == nil {
		err = canPauseAtDeadline(drv, req.OnExpiry)
	}
	if err != nil {
		return nil, err
	}
	// A driver that can applies the policy while the sandbox starts.
	startSpec, atStart := spec, false
	if nas, ok := drv.(driver.NetworkAtStart); ok && nas.NetworkAtStart() {
		startSpec.Network, atStart = req.Network, true
	}
	sctx, end := m.phase(ctx, req.Backend, PhaseStart, "driver.start")
	inst, err := drv.Start(sctx, startSpec)
	end(err)
	if err != nil {
		return nil, err
	}
	if !atStart {
		if err := applyNetwork(ctx, inst, req.Network); err != nil {
			_ = inst.Destroy(context.Background())
			return nil, err
		}
	}
	sb, err := m.adoptStarted(req, img, spec, drv, inst, adm)
	if err != nil {
		return nil, err
	}
	if started != nil {
		*started = true
	}
	m.log.DebugContext(ctx, "created sandbox", "id", id, "image", img.Name)
	return sb, nil
}

// specOf is the driver's spec of the sandbox req makes on img, called id.
func specOf(req api.CreateSandboxRequest, img image.Image, id string) driver.Spec {
	env := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return driver.Spec{
		ID: id, Image: img.Name, Layers: layersOf(img), CPU: req.CPU, Memory: req.MemoryBytes,
		Disk: req.DiskBytes, PidsMax: req.PidsMax, Env: env, Hostname: id, UserNS: req.UserNamespace,
		CPUClass: req.CPUClass, KSM: req.KSM, AllowSetuid: req.AllowSetuid,
	}
}

// adoptStarted makes inst, started from spec on drv, the sandbox req asked
// for: it records it and adds it to the node, in the place adm reserved. A
// record that cannot be saved destroys inst.
func (m *Manager) adoptStarted(req api.CreateSandboxRequest, img image.Image, spec driver.Spec, drv driver.Driver, inst driver.Instance, adm *admission) (*sandbox, error) {
	r := &record{
		ID: spec.ID, Backend: req.Backend, Image: img.Name, ImageRef: img.Ref, ImageDigest: img.Digest, Spec: spec, CreatedAt: m.now().UTC(),
		TTLSeconds: req.TTLSeconds, IdleTimeoutSeconds: req.IdleTimeoutSeconds,
		Env: req.Env, Labels: req.Labels, RequestID: req.RequestID, ImageConfig: img.Config, Network: req.Network,
	}
	r.OnExpiry = req.OnExpiry
	sb := newSandbox(m, drv, r, inst)
	if err := sb.save(); err != nil {
		_ = inst.Destroy(context.Background())
		return nil, err
	}
	m.mu.Lock()
	m.sandboxes[spec.ID] = sb
	adm.takenLocked()
	m.mu.Unlock()
	return sb, nil
}

// Delete implements session.Service. A sandbox still fetching its image
// (state pulling) stops there. Delete answers once the sandbox is out of
// the node's table and records and its init has died (or its teardown
// ended); the rest of the teardown (teardown.go) goes on in the background.
func (m *Manager) Delete(ctx context.Context, id string) error {
	m.busy()
	defer m.busy()
	if p := m.pullingOf(id); p != nil {
		return m.deletePulling(ctx, p)
	}
	sb, err := m.get(id)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	if sb.deleted {
		sb.mu.Unlock()
		return errdefs.NotFound("sandbox %q not found", id)
	}
	sb.deleted = true
	sb.tornDown = make(chan struct{})
	inst := sb.inst
	for _, p := range sb.procs {
		p.closeConn()
	}
	// Without its record a restarted agent releases whatever the teardown
	// had not (the drivers' Sweep, the layer holders' Sync).
	if err := removeRecord(m.recs, id); err != nil {
		m.log.Warn("remove record", "id", id, "err", err)
	}
	m.mu.Lock()
	delete(m.sandboxes, id)
	m.dying[id] = sb
	if sb.rec.RequestID != "" {
		delete(m.byRequest, sb.rec.RequestID)
	}
	m.mu.Unlock()
	sb.mu.Unlock()
	finished := m.startTeardown(ctx, sb, inst)
	select {
	case <-inst.Done():
	case <-finished:
		// A driver that could not stop the sandbox says so, as before
		// its teardown ran in the background: the caller hears of an
		// init that would not die (the next agent start releases it).
		if err := sb.teardownErr; err != nil && !driver.Exited(inst) {
			return err
		}
	case <-ctx.Done():
	}
	m.log.DebugContext(ctx, "deleted sandbox", "id", id)
	return nil
}

// Pause implements session.Service.
func (m *Manager) Pause(ctx context.Context, id string) (api.Sandbox, error) {
	return m.setPaused(ctx, id, true)
}

// Resume implements session.Service.
func (m *Manager) Resume(ctx context.Context, id string) (api.Sandbox, error) {
	if sb, stopped, err := m.resumeStopped(ctx, id); stopped || err != nil {
		return sb, err
	}
	return m.setPaused(ctx, id, false)
}

func (m *Manager) setPaused(ctx context.Context, id string, pause bool) (api.Sandbox, error) {
	sb, err := withCapability(m, id, func(b string) error { return errdefs.New(api.CodeNotImplemented, "backend %q cannot pause", b) },
		func(sb *sandbox, p driver.Pauser) error {
			var err error
			if pause {
				err = p.Pause(ctx)
			} else {
				err = sb.resume(ctx, p)
			}
			if err == nil {
				sb.rec.Paused = pause
			}
			return err
		})
	if err != nil {
		return api.Sandbox{}, err
	}
	return sb.view(), nil
}

// Reset implements session.Service: the sandbox gets a fresh writable layer and fresh
// processes; its ID, image, limits and metadata stay.
func (m *Manager) Reset(ctx context.Context, id string) (api.Sandbox, error) {
	sb, err := m.get(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.mu.Lock()
	if sb.deleted {
		sb.mu.Unlock()
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", id)
	}
	if err := sb.inst.Destroy(ctx); err != nil {
		sb.mu.Unlock()
		return api.Sandbox{}, fmt.Errorf("reset: %w", err)
	}
	for _, p := range sb.procs {
		p.closeConn()
	}
	sb.procs = map[string]*bgProc{}
	sb.rec.Procs = nil
	sb.rec.Paused, sb.rec.Reclaimed, sb.reattachPending = false, false, false
	spec, dropped := withoutPauseCopies(sb.rec.Spec)
	if sb.rec.Stopped || len(dropped.Layers) > 0 {
		m.mu.Lock()
		sb.rec.Spec, sb.rec.Stopped = spec, false
		m.releaseForkLayersLocked(dropped)
		m.mu.Unlock()
	}
	inst, err := sb.drv.Start(ctx, sb.rec.Spec)
	if err != nil {
		// The old sandbox is gone and no new one came up: drop it entirely so
		// nothing half-made stays.
		sb.deleted = true
		sb.mu.Unlock()
		_ = removeRecord(m.recs, id)
		_ = m.cfg.Images.Unmount(context.Background(), id)
		m.mu.Lock()
		delete(m.sandboxes, id)
		m.releaseForkLayersLocked(sb.rec.Spec)
		m.mu.Unlock()
		return api.Sandbox{}, fmt.Errorf("reset: %w", err)
	}
	sb.inst = inst
	err = errors.Join(applyNetwork(ctx, inst, sb.rec.Network), sb.save())
	sb.mu.Unlock()
	sb.touch()
	if err != nil {
		return api.Sandbox{}, err
	}
	return sb.view(), nil
}

// layersOf describes an image's layers (base first) to the driver: a directory
// layer, or an EROFS layer layerd mounted for this sandbox, as its directory
// (with the digest and role it has); an EROFS layer nobody mounted as the blob.
func layersOf(img image.Image) []driver.Layer {
	out := make([]driver.Layer, 0, len(img.Layers))
	for _, l := range img.Layers {
		dl := driver.Layer{Role: l.Role, Digest: l.Digest, Kind: driver.LayerDir, Path: l.Dir}
		if l.Dir == "" {
			dl.Kind = driver.LayerEROFS
		}
		out = append(out, dl)
	}
	return out
}

// instance returns the running instance for a session operation, or a clear error.
func (sb *sandbox) instance() (driver.Instance, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	switch {
	case sb.deleted:
		return nil, errdefs.NotFound("sandbox %q not found", sb.rec.ID)
	case sb.rec.Paused:
		return nil, errdefs.Conflict("sandbox %s is paused; resume it first", sb.rec.ID)
	case driver.Exited(sb.inst):
		return nil, errdefs.New(api.CodeSandboxGone, "sandbox %s has exited", sb.rec.ID)
	}
	sb.touch()
	return sb.inst, nil
}

// session looks up a sandbox and its running instance.
func (m *Manager) session(id string) (*sandbox, driver.Instance, error) {
	sb, err := m.get(id)
	if err != nil {
		return nil, nil, err
	}
	inst, err := sb.instance()
	return sb, inst, err
}

// expiryLoop deletes sandboxes past their TTL or idle timeout, and the records of
// sandboxes whose init died.
func (m *Manager) expiryLoop() {
	defer m.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := m.now()
		type due struct{ id, action string }
		var expired []due
		for _, sb := range m.all() {
			if action := sb.due(now); action != "" {
				expired = append(expired, due{sb.rec.ID, action})
			}
		}
		for _, d := range expired {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			m.expire(ctx, d.id, d.action)
			cancel()
		}
	}
}

// due says what happens to the sandbox now: api.ExpiryDelete or
// api.ExpiryPause at its deadline, api.ExpiryDelete past its idle timeout, ""
// nothing.
func (sb *sandbox) due(now time.Time) string {
	sb.mu.Lock()
	r := sb.rec
	at, ok := r.deadline()
	action := r.onExpiry()
	sb.mu.Unlock()
	if ok && now.After(at) {
		return action
	}
	if r.IdleTimeoutSeconds > 0 && now.Sub(time.Unix(0, sb.lastActive.Load())) > time.Duration(r.IdleTimeoutSeconds)*time.Second {
		return api.ExpiryDelete
	}
	return ""
}
