package trajectory

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// syncCountFS is a file system that counts the syncs reaching WAL files.
func syncCountFS(fs vfs.FS, n *atomic.Int64) vfs.FS {
	return walFS{FS: fs, wrap: func(f vfs.File) vfs.File { return &syncCountFile{f, n} }}
}

type syncCountFile struct {
	vfs.File
	n *atomic.Int64
}

func (f *syncCountFile) Sync() error     { f.n.Add(1); return f.File.Sync() }
func (f *syncCountFile) SyncData() error { f.n.Add(1); return f.File.SyncData() }

// TestPebbleStartedMarks: a started mark is written to the WAL file without an
// fsync (a copy of the files, which is what a killed process leaves, has it);
// Finish fsyncs.
func TestPebbleStartedMarks(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "log")
	var syncs atomic.Int64
	p, err := OpenPebble(dir, PebbleOptions{fs: syncCountFS(vfs.Default, &syncs)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	req := func(id string, n int) BeginRequest {
		return BeginRequest{Trajectory: id, N: n, Op: OpExec, Fingerprint: "f", SandboxID: "sb", Now: time.Now()}
	}
	base := syncs.Load()
	for i := range 20 {
		if _, err := p.Begin(ctx, req("mark"+strings.Repeat("x", i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := syncs.Load() - base; n != 0 {
		t.Fatalf("started marks alone caused %d WAL fsyncs", n)
	}
	// What a killed process leaves: the files as the page cache has them.
	crashed := filepath.Join(t.TempDir(), "crashed")
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := p.Finish(ctx, "mark", 1, Result{Status: 200, Body: []byte("ok")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if syncs.Load() == base {
		t.Fatal("Finish did not fsync the WAL")
	}
	os.Remove(filepath.Join(crashed, "LOCK"))
	c, err := OpenPebble(crashed, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Begin(ctx, req("markxxx", 1)); errdefs.CodeOf(err) != api.CodeOutcomeUnknown {
		t.Fatalf("a mark lost by a process crash: %v", err)
	}
}

// TestLazyWALDirty: the WAL writer's syncs are skipped, a durable sync fsyncs
// every WAL file written since, and Close fsyncs a dirty file.
func TestLazyWALDirty(t *testing.T) {
	var syncs atomic.Int64
	fs := newLazyWALFS(syncCountFS(vfs.NewMem(), &syncs))
	f1, _ := fs.Create("1.log", walCategory)
	f2, _ := fs.Create("2.log", walCategory)
	f3, _ := fs.Create("3.log", walCategory)
	other, _ := fs.Create("MANIFEST", "pebble-manifest")
	for _, f := range []vfs.File{f1, f2, f3, other} {
		if err := f.SyncData(); err != nil {
			t.Fatal(err)
		}
	}
	if n := syncs.Load(); n != 0 {
		t.Fatalf("skippable WAL syncs reached the disk: %d", n)
	}
	if err := fs.syncDurable(); err != nil || syncs.Load() != 3 {
		t.Fatalf("a durable sync should fsync every dirty WAL file: %d %v", syncs.Load(), err)
	}
	if err := fs.syncDurable(); err != nil || syncs.Load() != 3 {
		t.Fatalf("a durable sync with nothing written should not fsync: %d %v", syncs.Load(), err)
	}
	_ = f1.Sync()
	if err := f1.Close(); err != nil || syncs.Load() != 4 {
		t.Fatalf("closing a dirty WAL file should fsync it: %d %v", syncs.Load(), err)
	}
	if err := f3.Close(); err != nil || syncs.Load() != 4 {
		t.Fatalf("closing a clean WAL file should not: %d %v", syncs.Load(), err)
	}
	f2.Close()
	other.Close()
}

// TestPebbleBeginSkipsFsync: a started mark does not wait for the fsync of
// another trajectory's result (on a slow disk a Begin used to wait for the
// fsync in progress and then for the one its group shared with durable
// writes), while that result still waits for its fsync.
func TestPebbleBeginSkipsFsync(t *testing.T) {
	ctx := context.Background()
	const fsync = 300 * time.Millisecond
	var syncs atomic.Int64 // WAL fsyncs started (counted before the delay)
	slow := walFS{FS: vfs.Default, wrap: func(f vfs.File) vfs.File { return &syncCountFile{&slowSyncFile{f, fsync}, &syncs} }}
	p, err := OpenPebble(filepath.Join(t.TempDir(), "log"), PebbleOptions{fs: slow})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	req := func(id string, n int) BeginRequest {
		return BeginRequest{Trajectory: id, N: n, Op: OpExec, Fingerprint: "f", SandboxID: "sb", Now: time.Now()}
	}
	if _, err := p.Begin(ctx, req("a", 1)); err != nil {
		t.Fatal(err)
	}
	before := syncs.Load()
	done := make(chan time.Duration, 1)
	go func() {
		s := time.Now()
		if err := p.Finish(ctx, "a", 1, Result{Status: 200, Body: []byte("ok")}, time.Now()); err != nil {
			t.Error(err)
		}
		done <- time.Since(s)
	}()
	// The Finish's fsync is under way.
	testwait.For(t, 10*time.Second, "a WAL fsync of the Finish", func() bool { return syncs.Load() != before })
	s := time.Now()
	if _, err := p.Begin(ctx, req("b", 1)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(s); took > fsync/2 {
		t.Errorf("a Begin took %v while another trajectory's result was being fsynced (fsync %v)", took, fsync)
	}
	if took := <-done; took < fsync {
		t.Errorf("Finish returned after %v, before its fsync (%v) could have finished", took, fsync)
	}
}
