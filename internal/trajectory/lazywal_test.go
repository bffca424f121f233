package trajectory

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/dsec-dev/dsec/internal/errdefs"
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
	slow := walFS{FS: vfs.Default, wrap: func(f vfs.File) vfs.File { return &slowSyncFile{f, fsync} }}
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
	done := make(chan time.Duration, 1)
	go func() {
		s := time.Now()
		if err := p.Finish(ctx, "a", 1, Result{Status: 200, Body: []byte("ok")}, time.Now()); err != nil {
			t.Error(err)
		}
		done <- time.Since(s)
	}()
	time.Sleep(50 * time.Millisecond) // the Finish's fsync is under way
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

// gateFile is a WAL file whose fsyncs wait until gate lets them through.
type gateFile struct {
	vfs.File
	gate chan struct{}
}

func (f *gateFile) SyncData() error { <-f.gate; return f.File.SyncData() }
func (f *gateFile) Sync() error     { <-f.gate; return f.File.Sync() }

// TestLazyWALGathers: after an fsync that served several writers, the next
// one waits for as many writers to come back instead of starting with the
// first (with many trajectories that split them into two groups taking
// turns, two fsyncs per step); after an fsync of one writer nobody waits.
func TestLazyWALGathers(t *testing.T) {
	var syncs atomic.Int64
	gate := make(chan struct{})
	fs := newLazyWALFS(walFS{FS: syncCountFS(vfs.NewMem(), &syncs),
		wrap: func(f vfs.File) vfs.File { return &gateFile{f, gate} }})
	fs.maxGather = time.Minute // the gathering window is half the last fsync's length
	f, err := fs.Create("1.log", walCategory)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func() { _ = f.Sync() } // the WAL writer's skipped sync: the file is dirty
	durable := func(n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				write()
				if err := fs.syncDurable(); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// A lone writer: its fsync starts at once.
	go func() { gate <- struct{}{} }()
	durable(1)
	if w := fs.gatherWait(); w != 0 {
		t.Fatalf("after an fsync of one writer the next waits %v", w)
	}
	// Four writers and two slow fsyncs (300 ms each): the first one's,
	// then one for the three that came while it ran.
	go func() {
		for range 2 {
			time.Sleep(300 * time.Millisecond)
			gate <- struct{}{}
		}
	}()
	write()
	done := make(chan struct{})
	go func() { _ = fs.syncDurable(); close(done) }()
	time.Sleep(50 * time.Millisecond)
	durable(3)
	<-done
	if fs.lastGroup != 3 {
		t.Fatalf("the second fsync served %d writers, want 3", fs.lastGroup)
	}
	// They come back one after another, 10 ms apart: one fsync for the three.
	base := syncs.Load()
	go func() {
		for {
			select {
			case gate <- struct{}{}:
			case <-time.After(time.Second):
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 10 * time.Millisecond)
			write()
			if err := fs.syncDurable(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := syncs.Load() - base; n != 1 {
		t.Errorf("three writers coming back 10 ms apart after a shared fsync took %d fsyncs, want 1", n)
	}
}
