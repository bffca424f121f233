package trajectory

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walCategory is the write category Pebble creates its WAL files with.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// lazyWALFS gives the Pebble store the started-mark semantics of doc.go: a
// started mark must reach the WAL file (the page cache keeps it through a crash
// of the process) but needs no fsync. Pebble has no such write: a NoSync write
// stays in the WAL writer's memory until the next sync, a Sync write costs an
// fsync. So every write asks for a sync and this file system skips the fsyncs
// the WAL writer asks for: when it calls Sync the group's records have been
// written to the file.
//
// A durable write (Finish, Abort, ...) then calls syncDurable, a group fsync of
// its own: it waits for an fsync of every WAL file written so far that starts
// after its write, and one fsync serves every durable write waiting. The WAL
// writer never waits for a disk flush, so a started mark costs a write even
// while other trajectories' results are being flushed (with the WAL writer's
// own syncs, a Begin waited for the fsync in progress and then for the one its
// group shared with durable writes: ~3 fsyncs per step instead of ~1.5).
//
// durable counts durable writes from before they are queued until they are on
// disk: readers outside a trajectory's lock (Get, List) wait for a sync when it
// is not zero, so nobody sees a result that a power loss could take back.
// WAL files are synced oldest first, and a file is fsynced before it closes
// if it has unsynced writes, so a durable write is never on disk without the
// marks before it.
type lazyWALFS struct {
	vfs.FS
	durable atomic.Int64 // durable writes queued and not yet synced
	force   atomic.Bool  // every WAL writer sync is real (closing)

	mu    sync.Mutex
	files map[*lazyWALFile]bool // WAL files with skipped syncs
	seq   uint64                // creation order of WAL files

	smu      sync.Mutex // the group fsync
	scond    *sync.Cond
	syncing  bool
	started  uint64 // group syncs started
	finished uint64 // the last group sync that finished
	serr     error  // a failed fsync: the log is no longer durable
}

func newLazyWALFS(fs vfs.FS) *lazyWALFS {
	l := &lazyWALFS{files: map[*lazyWALFile]bool{}}
	l.scond = sync.NewCond(&l.smu)
	l.FS = walFS{FS: fs, wrap: func(f vfs.File) vfs.File {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.seq++
		return &lazyWALFile{File: f, fs: l, seq: l.seq}
	}}
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

// lazyWALFile is a WAL file whose syncs lazyWALFS skips.
type lazyWALFile struct {
	vfs.File
	fs  *lazyWALFS
	seq uint64
	// written counts the syncs the WAL writer asked for (each after a
	// write); cmu guards synced (the last count an fsync covered) and
	// closed, and serializes fsync and Close.
	written atomic.Uint64
	cmu     sync.Mutex
	synced  uint64
	closed  bool
}

func (f *lazyWALFile) Sync() error     { return f.sync() }
func (f *lazyWALFile) SyncData() error { return f.sync() }

func (f *lazyWALFile) sync() error {
	fs := f.fs
	f.written.Add(1)
	fs.mu.Lock()
	fs.files[f] = true
	fs.mu.Unlock()
	if fs.force.Load() {
		return fs.syncFiles()
	}
	return nil
}

// syncFiles fsyncs, oldest first, every WAL file with writes no fsync covered.
func (l *lazyWALFS) syncFiles() error {
	l.mu.Lock()
	files := make([]*lazyWALFile, 0, len(l.files))
	for f := range l.files {
		files = append(files, f)
	}
	l.mu.Unlock()
	slices.SortFunc(files, func(a, b *lazyWALFile) int { return cmp.Compare(a.seq, b.seq) })
	for _, f := range files {
		if err := f.syncData(); err != nil {
			return err
		}
	}
	return nil
}

// syncData fsyncs f if it has writes no fsync covered (nothing once closed:
// Close did).
func (f *lazyWALFile) syncData() error {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	w := f.written.Load()
	if f.closed || w == f.synced {
		return nil
	}
	if err := f.File.SyncData(); err != nil {
		return err
	}
	f.synced = w
	f.fs.mu.Lock()
	if f.written.Load() == w {
		delete(f.fs.files, f)
	}
	f.fs.mu.Unlock()
	return nil
}

// syncDurable returns once an fsync of every WAL file that started after the
// call has finished (or the first fsync error, which sticks).
func (l *lazyWALFS) syncDurable() error {
	l.smu.Lock()
	defer l.smu.Unlock()
	need := l.started + 1
	for l.finished < need && l.serr == nil {
		if l.syncing {
			l.scond.Wait()
			continue
		}
		l.syncing = true
		l.started++
		seq := l.started
		l.smu.Unlock()
		err := l.syncFiles()
		l.smu.Lock()
		l.syncing, l.finished = false, seq
		if err != nil {
			l.serr = err
		}
		l.scond.Broadcast()
	}
	return l.serr
}

// Close fsyncs the file if it has unsynced writes.
func (f *lazyWALFile) Close() error {
	err := f.syncData()
	f.cmu.Lock()
	f.closed = true
	f.cmu.Unlock()
	f.fs.mu.Lock()
	delete(f.fs.files, f)
	f.fs.mu.Unlock()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

// slowSyncFile is a WAL file whose fsyncs take d longer (PebbleOptions.SyncDelay).
type slowSyncFile struct {
	vfs.File
	d time.Duration
}

func (f *slowSyncFile) Sync() error     { time.Sleep(f.d); return f.File.Sync() }
func (f *slowSyncFile) SyncData() error { time.Sleep(f.d); return f.File.SyncData() }
