package agent

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/paths"
)

// teardownTimeout bounds a deleted sandbox's teardown in the background
// (the container driver gives up on an init that does not die within 30 s
// of SIGKILL on its own).
const teardownTimeout = 2 * time.Minute

// startTeardown releases a deleted sandbox (already out of m.sandboxes and
// its record removed, in m.dying) in the background: the driver's Destroy,
// its process logs, its layers, its fork copies. The returned channel is
// closed when it ended. A teardown that fails leaves what it could not
// release to the next agent start (Sweep and the layer holders' Sync
// release what no record names); Close and DeleteAll wait for every
// teardown.
func (m *Manager) startTeardown(ctx context.Context, sb *sandbox, inst driver.Instance) <-chan struct{} {
	finished := sb.tornDown
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	go func() {
		defer close(finished)
		defer cancel()
		id := sb.rec.ID
		if err := inst.Destroy(ctx); err != nil {
			sb.teardownErr = err
			m.log.Error("tear down deleted sandbox; the next agent start releases what is left", "id", id, "err", err)
		}
		_ = os.RemoveAll(m.logDir(id))
		if err := m.cfg.Images.Unmount(ctx, id); err != nil {
			m.log.Warn("release layers", "id", id, "err", err)
		}
		m.mu.Lock()
		delete(m.dying, id)
		m.releaseForkLayersLocked(sb.rec.Spec)
		m.mu.Unlock()
	}()
	return finished
}

// WaitTeardowns waits for the teardowns running now: a sandbox deleted
// before an image or layer is looked up no longer holds it.
func (m *Manager) WaitTeardowns() {
	m.mu.RLock()
	ends := make([]<-chan struct{}, 0, len(m.dying))
	for _, sb := range m.dying {
		ends = append(ends, sb.tornDown)
	}
	m.mu.RUnlock()
	for _, c := range ends {
		<-c
	}
}

// holdersLocked are the sandboxes whose fork copies are in use: the live
// ones and the deleted ones still being torn down. m.mu is held.
func (m *Manager) holdersLocked() []*sandbox {
	out := make([]*sandbox, 0, len(m.sandboxes)+len(m.dying))
	for _, sb := range m.sandboxes {
		out = append(out, sb)
	}
	for _, sb := range m.dying {
		out = append(out, sb)
	}
	return out
}

// sweepLogs removes the process log directories of sandboxes not in keep:
// those of a sandbox deleted while its teardown ran when the agent stopped.
func (m *Manager) sweepLogs(keep map[string]bool) {
	root := paths.New(m.cfg.DataDir).Logs("")
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() && !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				m.log.Warn("remove the process logs of a deleted sandbox", "id", e.Name(), "err", err)
			}
		}
	}
}
