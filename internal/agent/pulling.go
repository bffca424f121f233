package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A create with wait false (api.CreateSandboxRequest.Wait) whose image is a
// registry reference the node does not have answers at once: the node keeps
// a placeholder (state pulling, with the pull's progress) while it fetches
// the image and starts the sandbox, which then takes the placeholder's ID
// (state running), or the placeholder stays with the error (state failed)
// until it is deleted. Deleting a placeholder stops its create; the fetch
// goes on while another create (or `dsec image pull`) waits for the image,
// and stops when none does: the registry transfers end and the partial
// layers are removed (internal/image/pull).
// Each placeholder has a record (DATA_DIR/creating/ID.json: the request, and
// the error once failed): an agent that restarts takes up the creates it had
// not finished, under the same IDs, and keeps the failed ones.

// pulling is one create in flight behind a placeholder.
type pulling struct {
	id      string
	req     api.CreateSandboxRequest
	created time.Time
	cancel  context.CancelFunc
	done    chan struct{} // closed once the sandbox exists or the create failed

	mu  sync.Mutex
	err error // the create failed (state failed)
}

// needsPull reports whether a create of req answers before its image is on
// the node: wait false and a registry reference the node does not have.
func (m *Manager) needsPull(req api.CreateSandboxRequest) bool {
	refs := m.cfg.Images.Refs
	return !req.Waits() && refs != nil && !image.ValidName.MatchString(req.Image) &&
		image.IsReference(req.Image) && !refs.Has(req.Image)
}

// createPulling answers a create with its placeholder and goes on with it in
// the background. The placeholder holds a place under the node's sandbox
// limit, handed to the sandbox when it exists.
func (m *Manager) createPulling(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	adm, err := m.admit(1)
	if err != nil {
		return api.Sandbox{}, m.refusedAdmission(ctx, req.Backend, err)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &pulling{id: m.newID(), req: req, created: m.now().UTC(), cancel: cancel, done: make(chan struct{})}
	m.mu.Lock()
	if req.RequestID != "" {
		if prev, seen := m.byRequest[req.RequestID]; seen {
			m.mu.Unlock()
			cancel()
			adm[0].release()
			return m.awaitRequest(ctx, req.RequestID, prev)
		}
		m.byRequest[req.RequestID] = donePending(p.id)
	}
	m.pulls[p.id] = p
	m.mu.Unlock()
	if err := m.savePulling(p); err != nil {
		m.mu.Lock()
		delete(m.pulls, p.id)
		if req.RequestID != "" {
			delete(m.byRequest, req.RequestID)
		}
		m.mu.Unlock()
		cancel()
		adm[0].release()
		return api.Sandbox{}, err
	}
	m.goPulling(bg, p, adm[0])
	m.log.DebugContext(ctx, "creating sandbox while its image is fetched", "id", p.id, "image", req.Image)
	return m.pullingView(p), nil
}

func (m *Manager) goPulling(ctx context.Context, p *pulling, adm *admission) {
	m.wg.Add(1)
	go m.finishPulling(ctx, p, adm)
}

// pullingRecord is a placeholder's record.
type pullingRecord struct {
	ID      string                   `json:"id"`
	Request api.CreateSandboxRequest `json:"request"`
	Created time.Time                `json:"created"`
	Error   *api.Error               `json:"error,omitempty"`
}

func (m *Manager) creatingDir() string { return paths.New(m.cfg.DataDir).Creating() }

func (m *Manager) savePulling(p *pulling) error {
	rec := pullingRecord{ID: p.id, Request: p.req, Created: p.created}
	p.mu.Lock()
	if p.err != nil {
		rec.Error = errdefs.ToAPI(p.err)
	}
	p.mu.Unlock()
	if err := os.MkdirAll(m.creatingDir(), 0o700); err != nil {
		return errdefs.Internal(err, "record of sandbox %s", p.id)
	}
	if err := writeRecordFile(m.creatingDir(), p.id, rec); err != nil {
		return errdefs.Internal(err, "record of sandbox %s", p.id)
	}
	return nil
}

func (m *Manager) removePulling(id string) {
	if err := removeRecord(m.creatingDir(), id); err != nil {
		m.log.Warn("remove the record of a create", "id", id, "err", err)
	}
}

// resumePulling takes up the creates a previous agent answered before their
// image was on the node (after adopt: a create that made its sandbox just
// before the agent stopped is done).
func (m *Manager) resumePulling(ctx context.Context) {
	ents, err := os.ReadDir(m.creatingDir())
	if err != nil {
		if !os.IsNotExist(err) {
			m.log.Warn("records of creates in flight", "err", err)
		}
		return
	}
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(m.creatingDir(), name)
		if strings.HasPrefix(name, ".") {
			_ = os.Remove(path) // a write interrupted by a crash
			continue
		}
		var rec pullingRecord
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil || rec.ID+".json" != name {
			m.log.Error("unreadable record of a create in flight; removing it", "file", path, "err", err)
			_ = os.Remove(path)
			continue
		}
		m.mu.RLock()
		made := m.sandboxes[rec.ID] != nil
		m.mu.RUnlock()
		if made {
			m.removePulling(rec.ID)
			continue
		}
		bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p := &pulling{id: rec.ID, req: rec.Request, created: rec.Created, cancel: cancel, done: make(chan struct{})}
		var adm []*admission
		if rec.Error != nil {
			p.err = errdefs.New(rec.Error.Code, "%s", rec.Error.Message)
		} else if adm, err = m.admit(1); err != nil {
			p.err = err
			if err := m.savePulling(p); err != nil {
				m.log.Warn("record of a create in flight", "id", p.id, "err", err)
			}
		}
		if p.err != nil {
			cancel()
			close(p.done)
		}
		m.mu.Lock()
		if rec.Request.RequestID != "" {
			m.byRequest[rec.Request.RequestID] = donePending(rec.ID)
		}
		m.pulls[rec.ID] = p
		m.mu.Unlock()
		if p.err == nil {
			m.log.Info("taking up a create whose image was being fetched", "id", rec.ID, "image", rec.Request.Image)
			m.goPulling(bg, p, adm[0])
		}
	}
}

// stopping reports whether the agent is closing.
func (m *Manager) stopping() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}

// finishPulling fetches p's image and starts its sandbox; on failure p
// keeps the error.
func (m *Manager) finishPulling(ctx context.Context, p *pulling, adm *admission) {
	defer m.wg.Done()
	defer p.cancel()
	defer adm.release()
	sb, err := m.createPulled(ctx, p, adm)
	if err != nil && m.stopping() {
		// Stopped by Close: the record stays, the next agent takes it up.
		close(p.done)
		return
	}
	m.mu.Lock()
	if err != nil {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
	} else {
		// The sandbox (in m.sandboxes since startSandbox) answers for the ID.
		delete(m.pulls, p.id)
	}
	m.mu.Unlock()
	if err != nil {
		if serr := m.savePulling(p); serr != nil {
			m.log.Warn("record of a failed create", "id", p.id, "err", serr)
		}
	} else {
		m.removePulling(p.id)
	}
	close(p.done)
	if err != nil {
		m.log.InfoContext(ctx, "create failed while its image was fetched", "id", p.id, "image", p.req.Image, "err", err)
		return
	}
	if err := m.start(ctx, sb, p.req); err != nil {
		m.log.InfoContext(ctx, "start command of a sandbox created without waiting", "id", p.id, "err", err)
	}
}

func (m *Manager) createPulled(ctx context.Context, p *pulling, adm *admission) (*sandbox, error) {
	img, err := m.cfg.Images.ResolveContext(registry.WithAuth(ctx, p.req.RegistryAuth), p.req.Image)
	if err != nil {
		return nil, err
	}
	if err := checkEntrypoint(p.req, img); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // deleted meanwhile
	}
	return m.createOnID(ctx, p.req, img, nil, adm, p.id)
}

// pullingView is p as GET shows it.
func (m *Manager) pullingView(p *pulling) api.Sandbox {
	r := p.req
	v := api.Sandbox{
		ID: p.id, Backend: r.Backend, Image: r.Image, State: api.StatePulling,
		CPU: r.CPU, MemoryBytes: r.MemoryBytes, DiskBytes: r.DiskBytes, PidsMax: r.PidsMax,
		CreatedAt: p.created, LastActiveAt: p.created, IdleTimeoutSeconds: r.IdleTimeoutSeconds,
		Env: r.Env, Labels: r.Labels, RequestID: r.RequestID, CPUClass: r.CPUClass, KSM: r.KSM,
	}
	if v.CPUClass == "" {
		v.CPUClass = api.CPUClassLS
	}
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err != nil {
		v.State, v.Error = api.StateFailed, errdefs.ToAPI(err)
		return v
	}
	if pr, ok := m.cfg.Images.Refs.Progress(r.Image); ok {
		v.Pull, v.ImageRef, v.ImageDigest = &pr, pr.Ref, pr.Digest
	}
	return v
}

// pullingOf returns the placeholder of id (nil: none).
func (m *Manager) pullingOf(id string) *pulling {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.pulls[id]
}

// pullingViews returns the placeholders not yet replaced by their sandbox.
func (m *Manager) pullingViews() []api.Sandbox {
	m.mu.RLock()
	ps := make([]*pulling, 0, len(m.pulls))
	for id, p := range m.pulls {
		if m.sandboxes[id] == nil {
			ps = append(ps, p)
		}
	}
	m.mu.RUnlock()
	out := make([]api.Sandbox, 0, len(ps))
	for _, p := range ps {
		out = append(out, m.pullingView(p))
	}
	return out
}

// deletePulling stops p's create and removes its placeholder, and its
// sandbox if the create made one meanwhile.
func (m *Manager) deletePulling(ctx context.Context, p *pulling) error {
	p.cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		return errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "sandbox %s: waiting for its create to stop", p.id)
	}
	m.mu.Lock()
	delete(m.pulls, p.id)
	made := m.sandboxes[p.id] != nil
	if !made && p.req.RequestID != "" {
		delete(m.byRequest, p.req.RequestID)
	}
	m.mu.Unlock()
	m.removePulling(p.id)
	if made {
		return m.Delete(ctx, p.id)
	}
	m.log.DebugContext(ctx, "deleted sandbox before its image was fetched", "id", p.id)
	return nil
}

// pullingErr is what an operation other than GET, list and DELETE answers
// for a placeholder.
func pullingErr(p *pulling) error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err != nil {
		return errdefs.Conflict("sandbox %q failed before it ran (%v); delete it", p.id, err)
	}
	return errdefs.Conflict("sandbox %q is still fetching its image (state pulling)", p.id)
}

// stopPulling cancels the creates in flight (Close): their placeholders are
// not kept across a restart.
func (m *Manager) stopPulling() {
	m.mu.RLock()
	for _, p := range m.pulls {
		p.cancel()
	}
	m.mu.RUnlock()
}
