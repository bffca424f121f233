package buildstate

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Memory keeps builds in this process (`dsec server`: the one front end of
// its node): records and logs in memory, uploaded files in a temporary
// directory removed by Close. A build ends with the process that runs it.
type Memory struct {
	mu     sync.Mutex
	dir    string // "<hash>.tar"; created on first upload
	builds map[string]*memBuild
}

type memBuild struct {
	rec  Record
	logs []e2bapi.BuildLogEntry
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{builds: map[string]*memBuild{}} }

func notFound(id string) error {
	return errdefs.New(api.CodeNotFound, "template build %q not found", id)
}

// Create implements Store; it forgets the ended builds past Retention.
func (m *Memory) Create(_ context.Context, id string, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for old, b := range m.builds {
		if time.Since(b.rec.Created) > Retention && b.rec.Status != e2bapi.TemplateBuildStatusBuilding {
			delete(m.builds, old)
		}
	}
	r.Status = e2bapi.TemplateBuildStatusWaiting
	m.builds[id] = &memBuild{rec: r}
	return nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id string) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.builds[id]
	if !ok {
		return Record{}, notFound(id)
	}
	return b.rec, nil
}

// Start implements Store.
func (m *Memory) Start(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.builds[id]
	switch {
	case !ok:
		return notFound(id)
	case b.rec.Status != e2bapi.TemplateBuildStatusWaiting:
		return errdefs.New(api.CodeConflict, "build %q already started", id)
	}
	b.rec.Status, b.rec.Started = e2bapi.TemplateBuildStatusBuilding, time.Now().UTC()
	return nil
}

// Log implements Store.
func (m *Memory) Log(_ context.Context, id string, entries ...e2bapi.BuildLogEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.builds[id]
	if !ok {
		return notFound(id)
	}
	b.logs = append(b.logs, appendCapped(len(b.logs), entries)...)
	return nil
}

// Logs implements Store.
func (m *Memory) Logs(_ context.Context, id string, offset int) ([]e2bapi.BuildLogEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.builds[id]
	if !ok {
		return nil, notFound(id)
	}
	if offset >= len(b.logs) {
		return nil, nil
	}
	return append([]e2bapi.BuildLogEntry(nil), b.logs[offset:]...), nil
}

// Finish implements Store.
func (m *Memory) Finish(_ context.Context, id string, status e2bapi.TemplateBuildStatus, reason *e2bapi.BuildStatusReason) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.builds[id]
	switch {
	case !ok:
		return notFound(id)
	case b.rec.Status != e2bapi.TemplateBuildStatusBuilding:
		return errdefs.New(api.CodeConflict, "build %q is %s, not building", id, b.rec.Status)
	}
	b.rec.Status, b.rec.Reason, b.rec.Ended = status, reason, time.Now().UTC()
	return nil
}

// uploadDir returns the directory of uploaded files, creating it.
func (m *Memory) uploadDir() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dir == "" {
		d, err := os.MkdirTemp("", "dsec-e2b-uploads-")
		if err != nil {
			return "", errdefs.Internal(err, "template uploads directory")
		}
		m.dir = d
	}
	return m.dir, nil
}

// PutFiles implements Store.
func (m *Memory) PutFiles(_ context.Context, hash string, r io.Reader, _ int64) error {
	dir, err := m.uploadDir()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "upload-*")
	if err != nil {
		return errdefs.Internal(err, "template upload")
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, hash+".tar"))
	}
	if err != nil {
		return errdefs.Internal(err, "template upload")
	}
	return nil
}

// path is where the files of hash are ("" when no upload was made).
func (m *Memory) path(hash string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dir == "" {
		return ""
	}
	return filepath.Join(m.dir, hash+".tar")
}

// HasFiles implements Store.
func (m *Memory) HasFiles(_ context.Context, hash string) (bool, error) {
	p := m.path(hash)
	if p == "" {
		return false, nil
	}
	_, err := os.Stat(p)
	return err == nil, nil
}

// OpenFiles implements Store.
func (m *Memory) OpenFiles(_ context.Context, hash string) (io.ReadCloser, error) {
	p := m.path(hash)
	if p == "" {
		return nil, errdefs.New(api.CodeNotFound, "no files uploaded under hash %s", hash)
	}
	f, err := os.Open(p)
	if os.IsNotExist(err) {
		return nil, errdefs.New(api.CodeNotFound, "no files uploaded under hash %s", hash)
	}
	return f, err
}

// Close removes the uploaded files.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dir == "" {
		return nil
	}
	return os.RemoveAll(m.dir)
}
