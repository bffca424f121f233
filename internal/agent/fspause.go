package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// pauseRole marks the copy of a writable layer a filesystem-only pause kept
// among a sandbox's layers (driver.Layer.Role). Like a fork copy it lives in
// DATA_DIR/forks and goes with the last sandbox that stacks on it; unlike one,
// a reset drops it (it was the sandbox's own writable layer).
const pauseRole = "pause"

// copyRole reports whether a layer of that role is a copy of a writable layer
// the node made (a fork's or a filesystem-only pause's).
func copyRole(role string) bool { return role == forkRole || role == pauseRole }

// pauseFilesystem is a pause without memory (api.PauseRequest.Memory false):
// the sandbox is frozen, its writable layer copied out, its init and every
// process killed and its cgroup (memory) released; the record stays, with the
// copy stacked on its layers, so Resume boots it afresh on the same files
// under the same ID. Backends that cannot copy a writable layer
// (driver.Snapshotter) answer not_implemented, naming the backend.
func (m *Manager) pauseFilesystem(ctx context.Context, id string) (api.Sandbox, error) {
	sb, err := m.get(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	snap, rec, err := sb.lockSnapshotter("pause without memory", sb.drv.Capabilities().Fork)
	if err != nil {
		return api.Sandbox{}, err
	}
	err = m.stopLocked(ctx, sb, snap, rec)
	sb.mu.Unlock()
	if err != nil {
		return api.Sandbox{}, err
	}
	m.log.DebugContext(ctx, "paused sandbox without memory", "id", id)
	return sb.view(), nil
}

// stopLocked does pauseFilesystem's work with sb.mu held.
func (m *Manager) stopLocked(ctx context.Context, sb *sandbox, snap driver.Snapshotter, rec *record) error {
	// Frozen from here: nothing written after the copy is lost.
	if p, ok := sb.inst.(driver.Pauser); ok && !rec.Paused {
		if err := p.Pause(ctx); err != nil {
			return err
		}
		rec.Paused = true
	}
	dir := filepath.Join(paths.New(m.cfg.DataDir).Forks(), m.newID())
	m.mu.Lock()
	m.forking[dir]++
	m.mu.Unlock()
	defer func() { // the copy stays only if the record stacks on it
		m.mu.Lock()
		if m.forking[dir]--; m.forking[dir] <= 0 {
			delete(m.forking, dir)
		}
		m.removeForkDirLocked(dir)
		m.mu.Unlock()
	}()
	err := os.MkdirAll(filepath.Dir(dir), 0o700)
	if err == nil {
		_, err = snap.SnapshotRW(ctx, dir, nil)
	}
	if err == nil {
		err = sb.inst.Destroy(ctx)
	}
	if err != nil {
		if !driver.Exited(sb.inst) {
			_ = sb.save() // frozen, as a pause with memory
		}
		return err
	}
	for _, p := range sb.procs {
		p.closeConn()
	}
	sb.procs = map[string]*bgProc{}
	rec.Procs = nil
	m.mu.Lock() // removeForkDirLocked reads every record's layers under m.mu
	rec.Spec.Layers = append(slices.Clone(rec.Spec.Layers), driver.Layer{Role: pauseRole, Kind: driver.LayerDir, Path: dir})
	m.mu.Unlock()
	sb.inst = stoppedInstance{id: rec.ID, done: make(chan struct{})}
	rec.Paused, rec.Stopped, rec.Reclaimed, sb.reattachPending = true, true, false, false
	return sb.save()
}

// resumeStopped boots a sandbox paused without memory on its kept files. It
// reports false (and does nothing) for any other sandbox.
func (m *Manager) resumeStopped(ctx context.Context, id string) (api.Sandbox, bool, error) {
	sb, err := m.get(id)
	if err != nil {
		return api.Sandbox{}, false, err
	}
	sb.mu.Lock()
	if sb.deleted || !sb.rec.Stopped {
		sb.mu.Unlock()
		return api.Sandbox{}, false, nil
	}
	inst, err := sb.drv.Start(ctx, sb.rec.Spec)
	if err != nil {
		sb.mu.Unlock()
		return api.Sandbox{}, true, err
	}
	sb.inst = inst
	sb.rec.Paused, sb.rec.Stopped = false, false
	err = errors.Join(applyNetwork(ctx, inst, sb.rec.Network), sb.save())
	sb.mu.Unlock()
	sb.touch()
	if err != nil {
		return api.Sandbox{}, true, err
	}
	m.log.DebugContext(ctx, "resumed sandbox paused without memory", "id", id)
	return sb.view(), true, nil
}

// withoutPauseCopies returns spec without the copies filesystem-only pauses
// stacked on it (a reset starts from the image again), and those copies.
func withoutPauseCopies(spec driver.Spec) (driver.Spec, driver.Spec) {
	var dropped driver.Spec
	spec.Layers = slices.DeleteFunc(slices.Clone(spec.Layers), func(l driver.Layer) bool {
		if l.Role == pauseRole {
			dropped.Layers = append(dropped.Layers, l)
			return true
		}
		return false
	})
	return spec, dropped
}

// stoppedInstance stands for the init of a sandbox paused without memory:
// there is none. It never exits (the sandbox is paused, not gone); what needs
// a running sandbox is a conflict.
type stoppedInstance struct {
	id   string
	done chan struct{} // never closed
}

var _ driver.Instance = stoppedInstance{}
var _ driver.Pauser = stoppedInstance{}

func (s stoppedInstance) paused() error {
	return errdefs.Conflict("sandbox %s is paused without memory; resume it first", s.id)
}

func (s stoppedInstance) ID() string                    { return s.id }
func (s stoppedInstance) State() json.RawMessage        { return nil }
func (s stoppedInstance) Done() <-chan struct{}         { return s.done }
func (s stoppedInstance) Destroy(context.Context) error { return nil }

func (s stoppedInstance) Exec(context.Context, driver.ProcSpec, driver.Stdio) (driver.Proc, error) {
	return nil, s.paused()
}

func (s stoppedInstance) Attach(context.Context, string, driver.Stdio) (driver.Proc, error) {
	return nil, s.paused()
}

func (s stoppedInstance) FS(context.Context) (session.FS, error) { return nil, s.paused() }

func (s stoppedInstance) Dial(context.Context, int) (net.Conn, error) { return nil, s.paused() }

// Pause implements driver.Pauser: the sandbox is paused already.
func (s stoppedInstance) Pause(context.Context) error { return nil }

// Resume implements driver.Pauser; Manager.Resume boots such a sandbox
// (resumeStopped) before it would get here.
func (s stoppedInstance) Resume(context.Context) error { return s.paused() }
