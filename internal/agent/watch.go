package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Bounds of directory watches: per sandbox, and entries compared per read.
const (
	maxWatchesPerSandbox = 64
	maxWatchEntries      = 100_000
)

// dirWatch is one directory watch: what the directory held at its last read.
// The agent keeps it with its sandbox (a restart of the agent drops it), and
// compares on each read, so a watch costs nothing between reads.
type dirWatch struct {
	w    api.Watch
	mu   sync.Mutex // one read at a time
	last session.DirSnapshot
}

// CreateWatch implements session.Service.
func (m *Manager) CreateWatch(ctx context.Context, id string, req api.WatchRequest) (api.Watch, error) {
	sb, err := m.get(id)
	if err != nil {
		return api.Watch{}, err
	}
	fs, err := m.FS(ctx, id)
	if err != nil {
		return api.Watch{}, err
	}
	defer fs.Close()
	fi, err := fs.Stat(ctx, req.Path)
	if err != nil {
		return api.Watch{}, err
	}
	if fi.Type != "dir" {
		return api.Watch{}, errdefs.Invalid("path %s is not a directory", req.Path)
	}
	snap, err := session.ScanDir(ctx, fs, req.Path, req.Recursive, maxWatchEntries)
	if err != nil {
		return api.Watch{}, err
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	w := &dirWatch{w: api.Watch{ID: "w" + hex.EncodeToString(b[:]), Path: req.Path, Recursive: req.Recursive}, last: snap}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.watches == nil {
		sb.watches = map[string]*dirWatch{}
	}
	if len(sb.watches) >= maxWatchesPerSandbox {
		return api.Watch{}, errdefs.New(api.CodeResourceExhausted, "sandbox %s has %d watches; remove some first", id, maxWatchesPerSandbox)
	}
	sb.watches[w.w.ID] = w
	return w.w, nil
}

func (m *Manager) watch(id, watchID string) (*sandbox, *dirWatch, error) {
	sb, err := m.get(id)
	if err != nil {
		return nil, nil, err
	}
	sb.mu.Lock()
	w := sb.watches[watchID]
	sb.mu.Unlock()
	if w == nil {
		return nil, nil, errdefs.NotFound("watch %q not found in sandbox %s", watchID, id)
	}
	return sb, w, nil
}

// WatchEvents implements session.Service.
func (m *Manager) WatchEvents(ctx context.Context, id, watchID string) ([]api.WatchEvent, error) {
	sb, w, err := m.watch(id, watchID)
	if err != nil {
		return nil, err
	}
	fs, err := m.FS(ctx, id)
	if err != nil {
		return nil, err
	}
	defer fs.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	cur, err := session.ScanDir(ctx, fs, w.w.Path, w.w.Recursive, maxWatchEntries)
	if errdefs.Is(err, api.CodeNotFound) {
		sb.mu.Lock()
		delete(sb.watches, watchID)
		sb.mu.Unlock()
		return nil, errdefs.NotFound("the watched directory %s was removed", w.w.Path)
	}
	if err != nil {
		return nil, err
	}
	evs := session.DiffDir(w.last, cur)
	w.last = cur
	return evs, nil
}

// RemoveWatch implements session.Service.
func (m *Manager) RemoveWatch(ctx context.Context, id, watchID string) error {
	sb, _, err := m.watch(id, watchID)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	delete(sb.watches, watchID)
	sb.mu.Unlock()
	return nil
}
