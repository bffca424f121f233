package agent

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultMaxFork is the default bound on the children of one fork.
const DefaultMaxFork = 64

// forkRole marks a fork snapshot among a sandbox's layers (driver.Layer.Role).
const forkRole = "fork"

func (m *Manager) maxFork() int {
	if m.cfg.MaxFork > 0 {
		return m.cfg.MaxFork
	}
	return DefaultMaxFork
}

// Fork implements session.Sandboxes. The parent is frozen while its writable
// layer is copied to DATA_DIR/forks/ID (driver.Snapshotter); then Count children
// start on the parent's layers plus that copy, each with an empty writable
// layer. All or nothing: if a child fails, the children made so far are deleted
// and the copy removed. The copy goes with the last child that uses it.
func (m *Manager) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	if req.Count < 1 || req.Count > m.maxFork() {
		return api.ForkResult{}, errdefs.Invalid("count must be between 1 and %d (the node's --max-fork), got %d", m.maxFork(), req.Count)
	}
	creq, err := m.forkRequest(id, req.Overrides)
	if err != nil {
		return api.ForkResult{}, err
	}
	sb, err := m.get(id)
	if err != nil {
		return api.ForkResult{}, err
	}
	// All or nothing: room for every child is reserved before the snapshot.
	places, err := m.admit(req.Count)
	if err != nil {
		return api.ForkResult{}, err
	}
	defer func() {
		for _, p := range places {
			p.release()
		}
	}()

	snap, rec, err := sb.lockSnapshotter("fork", sb.drv.Capabilities().Fork)
	if err != nil {
		return api.ForkResult{}, err
	}
	dir := filepath.Join(paths.New(m.cfg.DataDir).Forks(), m.newID())
	m.mu.Lock()
	m.forking[dir]++
	m.mu.Unlock()
	// The copy stays while a child uses it; after a failure none does.
	defer func() {
		m.mu.Lock()
		if m.forking[dir]--; m.forking[dir] <= 0 {
			delete(m.forking, dir)
		}
		m.removeForkDirLocked(dir)
		m.mu.Unlock()
	}()
	start := time.Now()
	err = os.MkdirAll(filepath.Dir(dir), 0o700)
	var st driver.SnapshotStats
	if err == nil {
		st, err = snap.SnapshotRW(ctx, dir, nil)
	}
	img := image.Image{Name: rec.Image, Config: rec.ImageConfig}
	var top []image.Layer
	for _, l := range rec.Spec.Layers {
		if copyRole(l.Role) { // a fork of a fork or of a resumed sandbox: keep the earlier copies
			top = append(top, image.Layer{Role: l.Role, Dir: l.Path})
		}
	}
	sb.mu.Unlock()
	if err != nil {
		return api.ForkResult{}, err
	}
	snapTime := time.Since(start)
	top = append(top, image.Layer{Role: forkRole, Dir: dir})
	base, err := m.forkBase(rec, img)
	if err != nil {
		return api.ForkResult{}, err
	}

	res := api.ForkResult{Parent: id, SnapshotBytes: st.Bytes, SnapshotMillis: float64(snapTime.Microseconds()) / 1000}
	for i := 0; i < req.Count; i++ {
		child, err := m.createOn(ctx, creq, base, top, places[i])
		if err != nil {
			m.log.Warn("fork failed part-way; deleting its children", "parent", id, "made", len(res.Children), "err", err)
			for _, c := range res.Children {
				if derr := m.Delete(context.Background(), c.ID); derr != nil {
					m.log.Warn("delete fork child", "id", c.ID, "err", derr)
				}
			}
			return api.ForkResult{}, err
		}
		res.Children = append(res.Children, child.view())
	}
	m.log.Debug("forked sandbox", "id", id, "children", req.Count, "snapshot_bytes", st.Bytes, "snapshot", snapTime)
	return res, nil
}

// forkBase resolves the parent's image again for a child. A directory image
// is the same directories; a layered environment must still have the layers
// the parent runs on (a rebase since would give the children other files).
func (m *Manager) forkBase(rec *record, img image.Image) (image.Image, error) {
	name := rec.Image
	if rec.ImageDigest != "" {
		name = image.Pin(rec.ImageRef, rec.ImageDigest)
	}
	// The parent runs this image: its create's access to it stands for the
	// children (an image fetched with the create's own registry credentials
	// is not asked of the registry again).
	cur, err := m.cfg.Images.ResolveContext(registry.WithAccessChecked(context.Background()), name)
	if err != nil {
		return img, err
	}
	var want []string
	for _, l := range rec.Spec.Layers {
		if !copyRole(l.Role) && l.Digest != "" {
			want = append(want, l.Digest)
		}
	}
	var got []string
	for _, l := range cur.Layers {
		if l.Digest != "" {
			got = append(got, l.Digest)
		}
	}
	if strings.Join(want, ",") != strings.Join(got, ",") {
		return img, errdefs.Conflict("environment %q changed since sandbox %s was created; its children cannot get the same layers", rec.Image, rec.ID)
	}
	cur.Config = img.Config
	return cur, nil
}

// forkRequest is the create request of a child: the parent's limits, env,
// labels and timeouts with the overrides applied.
func (m *Manager) forkRequest(id string, o *api.CreateSandboxRequest) (api.CreateSandboxRequest, error) {
	sb, err := m.get(id)
	if err != nil {
		return api.CreateSandboxRequest{}, err
	}
	sb.mu.Lock()
	r := sb.rec
	req := api.CreateSandboxRequest{
		Backend: r.Backend, Image: r.Image, CPU: r.Spec.CPU, MemoryBytes: r.Spec.Memory,
		DiskBytes: r.Spec.Disk, PidsMax: r.Spec.PidsMax, TTLSeconds: r.TTLSeconds,
		IdleTimeoutSeconds: r.IdleTimeoutSeconds, Env: maps.Clone(r.Env), Labels: maps.Clone(r.Labels),
		AllowSetuid: r.Spec.AllowSetuid,
	}
	sb.mu.Unlock()
	if o != nil {
		if o.Backend != "" || o.Image != "" || o.RequestID != "" {
			return req, errdefs.Invalid("overrides: backend, image and request_id cannot be changed by a fork")
		}
		if o.StartCmd != "" || o.Entrypoint || o.ReadyCmd != "" || o.ReadyPort != 0 || o.ReadyTimeoutMs != 0 {
			return req, errdefs.Invalid("overrides: a fork runs no start command (start_cmd, entrypoint, ready_*)")
		}
		if o.CPU != 0 {
			req.CPU = o.CPU
		}
		if o.MemoryBytes != 0 {
			req.MemoryBytes = o.MemoryBytes
		}
		if o.DiskBytes != 0 {
			req.DiskBytes = o.DiskBytes
		}
		if o.PidsMax != 0 {
			req.PidsMax = o.PidsMax
		}
		if o.TTLSeconds != 0 {
			req.TTLSeconds = o.TTLSeconds
		}
		if o.IdleTimeoutSeconds != 0 {
			req.IdleTimeoutSeconds = o.IdleTimeoutSeconds
		}
		if len(o.Env) > 0 && req.Env == nil {
			req.Env = map[string]string{}
		}
		maps.Copy(req.Env, o.Env)
		if len(o.Labels) > 0 && req.Labels == nil {
			req.Labels = map[string]string{}
		}
		maps.Copy(req.Labels, o.Labels)
	}
	if err := validate(&req); err != nil {
		return req, err
	}
	return req, nil
}

// releaseForkLayersLocked removes the fork copies spec stacked on that no other
// sandbox (nor a fork still creating children) uses any more. m.mu is held.
func (m *Manager) releaseForkLayersLocked(spec driver.Spec) {
	for _, l := range spec.Layers {
		if copyRole(l.Role) {
			m.removeForkDirLocked(l.Path)
		}
	}
}

// removeForkDirLocked removes fork copy dir unless it is still in use.
func (m *Manager) removeForkDirLocked(dir string) {
	if m.forking[dir] > 0 || !m.isForkDir(dir) {
		return
	}
	for _, sb := range m.holdersLocked() {
		for _, l := range sb.rec.Spec.Layers { // changed only under m.mu
			if copyRole(l.Role) && l.Path == dir {
				return
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		m.log.Warn("remove fork copy", "dir", dir, "err", err)
	}
}

func (m *Manager) isForkDir(dir string) bool {
	return filepath.Dir(dir) == paths.New(m.cfg.DataDir).Forks()
}

// gcForks removes fork copies no recorded sandbox uses (forks interrupted by
// a crash, children deleted while the agent was down).
func (m *Manager) gcForks() {
	root := paths.New(m.cfg.DataDir).Forks()
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range ents {
		m.removeForkDirLocked(filepath.Join(root, e.Name()))
	}
}

// lockSnapshotter locks sb for a copy of its writable layer (fork, commit) and
// returns its Snapshotter and record; on success sb.mu stays locked (the copy
// must not race a delete) and the caller unlocks it.
func (sb *sandbox) lockSnapshotter(op string, capable bool) (driver.Snapshotter, *record, error) {
	sb.mu.Lock()
	snap, ok := sb.inst.(driver.Snapshotter)
	var err error
	switch {
	case sb.deleted:
		err = errdefs.NotFound("sandbox %q not found", sb.rec.ID)
	case sb.rec.Stopped:
		err = errdefs.Conflict("sandbox %s is paused without memory; resume it first", sb.rec.ID)
	case !capable || !ok:
		err = errdefs.New(api.CodeNotImplemented, "backend %q cannot %s", sb.rec.Backend, op)
	case driver.Exited(sb.inst):
		err = errdefs.New(api.CodeSandboxGone, "sandbox %s has exited", sb.rec.ID)
	}
	if err != nil {
		sb.mu.Unlock()
		return nil, nil, err
	}
	return snap, sb.rec, nil
}
