package trajectory

import (
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walCategory is the write category Pebble creates its WAL files with.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// lazyWALFS gives the Pebble store the started-mark semantics of doc.go: a
// started mark must reach the WAL file (the page cache keeps it through a crash
// of the process) but needs no fsync. Pebble has no such write: a NoSync write
// stays in the WAL writer's memory until the next sync, a Sync write costs an
// fsync. So Begin asks for a sync and this file system skips the fsyncs of WAL
// groups that no durable write waits for: their records have been written to
// the file when the WAL writer calls Sync, and the next durable write's fsync
// covers them.
//
// A durable write (Finish, Abort, ...) counts itself in durable from before it
// is queued until its fsync returned, so every sync that may carry it is real.
// A WAL file whose sync was skipped is dirty until a real sync: a real sync of
// another WAL file (after a rotation) or its Close first fsyncs it, so a durable
// write is never on disk without the marks before it.
type lazyWALFS struct {
	vfs.FS
	durable atomic.Int64 // durable writes queued and not yet synced
	force   atomic.Bool  // every sync is real (closing)

	mu    sync.Mutex
	dirty map[*lazyWALFile]bool
}

func newLazyWALFS(fs vfs.FS) *lazyWALFS {
	l := &lazyWALFS{dirty: map[*lazyWALFile]bool{}}
	l.FS = walFS{FS: fs, wrap: func(f vfs.File) vfs.File { return &lazyWALFile{File: f, fs: l} }}
	return l
}

// walFS is fs with the WAL files it creates or reuses wrapped by wrap.
type walFS struct {
	vfs.FS
	wrap func(vfs.File) vfs.File
}

func (fs walFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrapWAL(f, c, err)
}

func (fs walFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrapWAL(f, c, err)
}

func (fs walFS) wrapWAL(f vfs.File, c vfs.DiskWriteCategory, err error) (vfs.File, error) {
	if err != nil || c != walCategory {
		return f, err
	}
	return fs.wrap(f), nil
}

// lazyWALFile is a WAL file whose syncs lazyWALFS may skip.
type lazyWALFile struct {
	vfs.File
	fs *lazyWALFS
}

func (f *lazyWALFile) Sync() error     { return f.sync(f.File.Sync) }
func (f *lazyWALFile) SyncData() error { return f.sync(f.File.SyncData) }

func (f *lazyWALFile) sync(real func() error) error {
	fs := f.fs
	fs.mu.Lock()
	if fs.durable.Load() == 0 && !fs.force.Load() {
		fs.dirty[f] = true
		fs.mu.Unlock()
		return nil
	}
	delete(fs.dirty, f)
	// Older WAL files first (rare: only after a rotation).
	for o := range fs.dirty {
		if err := o.File.SyncData(); err != nil {
			fs.mu.Unlock()
			return err
		}
		delete(fs.dirty, o)
	}
	fs.mu.Unlock()
	return real()
}

// Close fsyncs the file if a sync was skipped.
func (f *lazyWALFile) Close() error {
	fs := f.fs
	fs.mu.Lock()
	var err error
	if fs.dirty[f] {
		delete(fs.dirty, f)
		err = f.File.SyncData()
	}
	fs.mu.Unlock()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}
