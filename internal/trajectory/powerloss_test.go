package trajectory

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Power loss. The Pebble store runs over Pebble's strict in-memory file system
// (vfs.NewCrashableMem), which keeps apart what was written and what was
// fsynced: CrashClone returns the file system a power loss at that instant
// leaves when the disk keeps exactly what was fsynced (every synced byte and
// directory entry, nothing else). A workload of concurrent trajectories runs while
// every powerLoss.every-th write, sync, creation or rename of its files takes
// such a snapshot together with what the callers had been answered so far; each
// snapshot is then opened as a new store and checked:
//
//   - the store opens (no corruption) and lists and reads every trajectory;
//   - every step whose Finish (or Abort as unknown) returned is there, finished
//     with exactly its result (or unknown), and re-issuing it replays that
//     result (or answers outcome_unknown): nothing answered is run or answered
//     again;
//   - nothing else is there but at most the one step that was in progress, and
//     no step holds a result it was not given;
//   - the next step runs live.
//
// TestPebblePowerLossTorn runs the same with a disk that also wrote back some
// of the unsynced blocks, in any order (torn writes): the log must still open
// with every answer (walrepair.go); without cutting a torn WAL some crash point
// leaves a log that does not open (TestPebblePowerLossTornWeakened).
//
// This exercises the store's own sync path (the lazy WAL: started marks written
// but not fsynced, results fsynced in groups) through WAL rotation and
// recycling, memtable flushes and compactions. The bbolt store writes through
// *os.File and mmap and has no file system layer to do this with; its power
// loss is modelled at the file level in boltloss_test.go.

// crashFS is a file system whose writable files call hook before each write,
// sync and creation. dropWALSyncs weakens it: fsyncs of WAL files do nothing
// (the store's sync path removed), which the test must catch.
type crashFS struct {
	vfs.FS
	hook         func()
	created      func(name string)
	dropWALSyncs bool
}

func (fs *crashFS) wrap(f vfs.File, c vfs.DiskWriteCategory, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &crashFile{File: f, fs: fs, drop: fs.dropWALSyncs && c == walCategory}, nil
}

func (fs *crashFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.hook()
	fs.created(name)
	f, err := fs.FS.Create(name, c)
	return fs.wrap(f, c, err)
}

func (fs *crashFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.hook()
	fs.created(newname)
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(f, c, err)
}

func (fs *crashFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, o...)
	return fs.wrap(f, c, err)
}

func (fs *crashFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return fs.wrap(f, "", err)
}

func (fs *crashFS) Rename(oldname, newname string) error {
	fs.hook()
	return fs.FS.Rename(oldname, newname)
}

type crashFile struct {
	vfs.File
	fs   *crashFS
	drop bool
}

func (f *crashFile) Write(p []byte) (int, error) { f.fs.hook(); return f.File.Write(p) }
func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.hook()
	return f.File.WriteAt(p, off)
}
func (f *crashFile) Sync() error     { return f.sync(f.File.Sync) }
func (f *crashFile) SyncData() error { return f.sync(f.File.SyncData) }
func (f *crashFile) sync(real func() error) error {
	f.fs.hook()
	if f.drop {
		return nil
	}
	return real()
}

// powerLoss is one run: the workload's answers and the snapshots taken.
type powerLoss struct {
	mem   *vfs.MemFS
	every int64 // crash at every every-th event
	// stopAtFirst ends the crash points at the first failed check.
	stopAtFirst bool
	// torn keeps that percentage of the unsynced 4 KiB blocks and directory
	// entries at a crash (a disk that wrote some dirty pages back, in any
	// order); 0: exactly what was fsynced.
	torn int
	// keepTorn opens the crashed log without cutting a torn WAL (weakened).
	keepTorn bool
	rng      *rand.Rand
	cuts     atomic.Int64 // torn WAL files cut on reopening
	store    atomic.Pointer[Pebble]

	armed   atomic.Bool // crash points start once the log is open
	events  atomic.Int64
	created sync.Map   // file name suffix (.log, .sst): how many were created
	crashMu sync.Mutex // one crash at a time

	mu       sync.Mutex
	acked    map[string]int // trajectory: highest step answered
	points   int
	problems []string // the first failed check of each crash point
}

const (
	plDir       = "/powerloss/log" // not a real path: the disk guard cannot statfs it and lets writes through
	plSteps     = 24
	plParallel  = 4
	plMemTable  = 128 << 10
	plMaxReport = 10
)

func plTraj(i int) string                  { return fmt.Sprintf("traj-%d", i) }
func plFingerprint(t string, n int) string { return fmt.Sprintf("fp-%s-%d", t, n) }

// plUnknown: the steps the workload ends as unknown (Abort MarkUnknown).
func plUnknown(n int) bool { return n%7 == 0 }

// plRollback: the steps the workload first rolls back, then runs again.
func plRollback(n int) bool { return n%5 == 0 }

// plBody is step n's answer: sizes from a few bytes to 40 KiB, so that memtables
// flush and WAL files rotate during the run.
func plBody(t string, n int) []byte {
	size := 16 + (n*7919+len(t)*104729)%(40<<10)
	return bytes.Repeat([]byte(fmt.Sprintf("%s/%d;", t, n)), size/8+1)[:size]
}

// plInput is step n's request body (an upload), logged with its started mark:
// large marks, written and not fsynced, span several blocks of the WAL.
func plInput(t string, n int) []byte { return plBody(t, n+1000) }

func plBegin(t string, n int) BeginRequest {
	return BeginRequest{Trajectory: t, N: n, Op: OpUploadArchive, Fingerprint: plFingerprint(t, n), SandboxID: "sb-" + t,
		Args: []byte(`{"path":"/w"}`), Input: plInput(t, n), InputStored: true, Now: time.Now()}
}

// hook counts an event and takes a crash snapshot on every every-th.
// In torn mode only events while a WAL file has writes no fsync covered
// count: the crash points where a torn WAL is possible.
func (pl *powerLoss) hook() {
	if !pl.armed.Load() {
		return
	}
	if s := pl.store.Load(); pl.torn > 0 && (s == nil || !s.fs.dirty()) {
		return
	}
	if pl.events.Add(1)%pl.every == 0 {
		pl.crash()
	}
}

// dirty reports whether a WAL file has writes no fsync covered.
func (l *lazyWALFS) dirty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.files) > 0
}

// crash takes the file system a power loss now would leave, with the answers
// given before it, and checks it.
func (pl *powerLoss) crash() {
	pl.crashMu.Lock()
	defer pl.crashMu.Unlock()
	pl.mu.Lock()
	cfg := vfs.CrashCloneCfg{}
	if pl.torn > 0 {
		cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: pl.torn, RNG: pl.rng}
	}
	crashed := pl.mem.CrashClone(cfg)
	acked := make(map[string]int, len(pl.acked))
	for k, v := range pl.acked {
		acked[k] = v
	}
	pl.points++
	point := pl.points
	pl.mu.Unlock()
	if err := checkCrashed(crashed, acked, pl.keepTorn, &pl.cuts); err != nil {
		if pl.stopAtFirst {
			pl.armed.Store(false)
		}
		pl.mu.Lock()
		pl.problems = append(pl.problems, fmt.Sprintf("crash point %d (event %d): %v", point, pl.events.Load(), err))
		pl.mu.Unlock()
	}
}

// checkCrashed opens the log a crash left and checks it against the answers
// given before the crash.
func checkCrashed(fs vfs.FS, acked map[string]int, keepTorn bool, cuts *atomic.Int64) error {
	ctx := context.Background()
	quiet := slog.New(countWarnings{slog.NewTextHandler(io.Discard, nil), cuts})
	p, err := OpenPebble(plDir, PebbleOptions{fs: fs, MemTableSize: plMemTable, Logger: quiet, keepTorn: keepTorn})
	if err != nil {
		return fmt.Errorf("the log does not open: %w", err)
	}
	defer p.Close()
	trajs := make([]string, plParallel)
	for i := range trajs {
		trajs[i] = plTraj(i)
	}
	if err := checkAnswers(ctx, p, trajs, acked); err != nil {
		return err
	}
	return p.Close()
}

// checkAnswers checks the trajectories trajs of a log reopened after a crash
// against the answers given before it (acked: the last step answered of each):
// every answered step is there exactly, re-issuing it never runs it, nothing
// but the one step in progress is there besides, and the next step runs live.
func checkAnswers(ctx context.Context, p Store, trajs []string, acked map[string]int) error {
	metas, err := p.List(ctx)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	listed := map[string]bool{}
	for _, m := range metas {
		listed[m.ID] = true
	}
	for _, t := range trajs {
		last := acked[t]
		if last > 0 && !listed[t] {
			return fmt.Errorf("%s: answered up to step %d, missing from the list", t, last)
		}
		meta, steps, err := p.Get(ctx, t)
		if errdefs.CodeOf(err) == api.CodeNotFound && last == 0 {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: get: %w", t, err)
		}
		if len(steps) < last || len(steps) > last+1 {
			return fmt.Errorf("%s: answered up to step %d, the log has %d steps", t, last, len(steps))
		}
		for i, s := range steps {
			n := i + 1
			if s.N != n || s.Fingerprint != plFingerprint(t, n) {
				return fmt.Errorf("%s: step %d is logged as step %d %s", t, n, s.N, s.Fingerprint)
			}
			if err := checkStep(ctx, p, t, s, n <= last); err != nil {
				return err
			}
		}
		if meta.Last != len(steps) {
			return fmt.Errorf("%s: meta says the last step is %d, the log has %d", t, meta.Last, len(steps))
		}
		next := len(steps) + 1
		if d, err := p.Begin(ctx, plBegin(t, next)); err != nil || d.Replay != nil {
			return fmt.Errorf("%s: the next step %d after the crash does not run live: %v", t, next, err)
		}
	}
	return nil
}

// checkStep checks logged step s of trajectory t (answered: its Finish or
// Abort returned before the crash) and that re-issuing it never runs it.
func checkStep(ctx context.Context, p Store, t string, s Step, answered bool) error {
	n := s.N
	if !bytes.Equal(s.Input, plInput(t, n)) {
		return fmt.Errorf("%s: step %d's logged request body is not the one it was given", t, n)
	}
	d, err := p.Begin(ctx, plBegin(t, n))
	switch s.State {
	case api.StepFinished:
		if plUnknown(n) {
			return fmt.Errorf("%s: step %d was marked unknown, the log has it finished", t, n)
		}
		if s.Result == nil || s.Result.Status != 200 || !bytes.Equal(s.Result.Body, plBody(t, n)) {
			return fmt.Errorf("%s: step %d's logged result is not the one it was given", t, n)
		}
		if err != nil || d.Replay == nil || d.Replay.Result == nil || !bytes.Equal(d.Replay.Result.Body, plBody(t, n)) {
			return fmt.Errorf("%s: re-issued finished step %d is not replayed exactly (err %v)", t, n, err)
		}
	case api.StepUnknown:
		if answered && !plUnknown(n) {
			return fmt.Errorf("%s: step %d was answered with its result, the log has it unknown", t, n)
		}
		if errdefs.CodeOf(err) != api.CodeOutcomeUnknown {
			return fmt.Errorf("%s: re-issued unknown step %d: %v, want outcome_unknown", t, n, err)
		}
	default:
		return fmt.Errorf("%s: step %d is %q after a restart", t, n, s.State)
	}
	return nil
}

// countFile counts a file the log creates (or recycles), by kind.
func (pl *powerLoss) countFile(name string) {
	n, _ := pl.created.LoadOrStore(filepath.Ext(name), new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

func (pl *powerLoss) createdFiles(ext string) int64 {
	if n, ok := pl.created.Load(ext); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// run runs the workload: plParallel trajectories of plSteps steps each, at once.
func (pl *powerLoss) run(t *testing.T, dropWALSyncs bool) {
	ctx := context.Background()
	pl.mem = vfs.NewCrashableMem()
	pl.acked = map[string]int{}
	pl.rng = rand.New(rand.NewPCG(1, 2))
	// The node's data directory exists, durably, before the log is opened.
	if err := pl.mem.MkdirAll(plDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/", "/powerloss", plDir} {
		f, err := pl.mem.OpenDir(d)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fs := &crashFS{FS: pl.mem, hook: pl.hook, dropWALSyncs: dropWALSyncs, created: pl.countFile}
	p, err := OpenPebble(plDir, PebbleOptions{fs: fs, MemTableSize: plMemTable})
	if err != nil {
		t.Fatal(err)
	}
	pl.store.Store(p)
	pl.armed.Store(true)
	var wg sync.WaitGroup
	errs := make(chan error, plParallel)
	for i := range plParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pl.trajectory(ctx, p, plTraj(i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if pl.armed.Load() {
		pl.crash() // a power loss after the last answer
	}
	pl.armed.Store(false)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// trajectory runs one trajectory's steps, recording each answer.
func (pl *powerLoss) trajectory(ctx context.Context, p *Pebble, t string) error {
	for n := 1; n <= plSteps; n++ {
		if err := plStart(ctx, p, t, n); err != nil {
			return err
		}
		if err := plEnd(ctx, p, t, n); err != nil {
			return err
		}
		pl.mu.Lock()
		pl.acked[t] = n
		pl.mu.Unlock()
	}
	return nil
}

// plStart starts step n of t (rolling it back once and starting it again
// where plRollback says).
func plStart(ctx context.Context, p Store, t string, n int) error {
	if _, err := p.Begin(ctx, plBegin(t, n)); err != nil {
		return fmt.Errorf("%s: begin %d: %w", t, n, err)
	}
	if plRollback(n) {
		if err := p.Abort(ctx, t, n, Rollback); err != nil {
			return fmt.Errorf("%s: roll back %d: %w", t, n, err)
		}
		if _, err := p.Begin(ctx, plBegin(t, n)); err != nil {
			return fmt.Errorf("%s: begin %d again: %w", t, n, err)
		}
	}
	return nil
}

// plEnd answers step n of t: finished with plBody, or unknown.
func plEnd(ctx context.Context, p Store, t string, n int) error {
	var err error
	if plUnknown(n) {
		err = p.Abort(ctx, t, n, MarkUnknown)
	} else {
		err = p.Finish(ctx, t, n, Result{Status: 200, Body: plBody(t, n)}, time.Now())
	}
	if err != nil {
		return fmt.Errorf("%s: finish %d: %w", t, n, err)
	}
	return nil
}

// TestPebblePowerLoss: at every crash point, every answered step survives a
// power loss exactly, nothing answered runs again, and the log opens.
func TestPebblePowerLoss(t *testing.T) {
	pl := &powerLoss{every: 13}
	start := time.Now()
	pl.run(t, false)
	t.Logf("%d crash points over %d events in %v", pl.points, pl.events.Load(), time.Since(start).Round(time.Millisecond))
	// The crash points must fall across WAL rotation and memtable flushes.
	wals, ssts := pl.createdFiles(".log"), pl.createdFiles(".sst")
	t.Logf("the log created %d WAL files and %d sstables", wals, ssts)
	if pl.points < 50 || wals < 3 || ssts < 2 {
		t.Errorf("only %d crash points, %d WAL files, %d sstables: the workload is too small to prove anything", pl.points, wals, ssts)
	}
	for i, p := range pl.problems {
		if i == plMaxReport {
			t.Errorf("... and %d more", len(pl.problems)-i)
			break
		}
		t.Error(p)
	}
}

// TestPebblePowerLossWeakened: the same test against a log whose WAL fsyncs do
// nothing must find answered steps lost (the check can fail).
func TestPebblePowerLossWeakened(t *testing.T) {
	pl := &powerLoss{every: 17, stopAtFirst: true}
	pl.run(t, true)
	lost := slices.IndexFunc(pl.problems, func(p string) bool { return strings.Contains(p, "answered") })
	if lost < 0 {
		t.Fatalf("%d crash points with the WAL fsyncs removed, and no answered step was lost", pl.points)
	}
	t.Logf("with the WAL fsyncs removed, %d of %d crash points lost answers, e.g. %s", len(pl.problems), pl.points, pl.problems[lost])
}

// plTornRuns bounds the runs of the torn tests: a torn WAL that needs the cut
// shows up at a few percent of the crash points.
const plTornRuns = 12

// TestPebblePowerLossTorn: crash points where the disk also kept a random half
// of the unsynced blocks: every answered step survives and the log opens. It
// runs until some crash point needed a torn WAL cut (at most plTornRuns runs).
func TestPebblePowerLossTorn(t *testing.T) {
	points, cuts := 0, int64(0)
	for run := 0; run < plTornRuns && cuts == 0; run++ {
		pl := &powerLoss{every: 3, torn: 50}
		pl.run(t, false)
		points, cuts = points+pl.points, cuts+pl.cuts.Load()
		for i, p := range pl.problems {
			if i == plMaxReport {
				t.Errorf("... and %d more", len(pl.problems)-i)
				break
			}
			t.Error(p)
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d torn crash points, %d torn WAL files cut", points, cuts)
	if cuts == 0 {
		t.Errorf("%d torn crash points and no torn WAL: the test did not reach the case it is for", points)
	}
}

// TestPebblePowerLossTornWeakened: without cutting a torn WAL's unsynced tail,
// some crash point leaves a log that does not open (the repair is needed).
func TestPebblePowerLossTornWeakened(t *testing.T) {
	points := 0
	for run := 0; run < plTornRuns; run++ {
		pl := &powerLoss{every: 3, torn: 50, keepTorn: true, stopAtFirst: true}
		pl.run(t, false)
		points += pl.points
		if i := slices.IndexFunc(pl.problems, func(p string) bool { return strings.Contains(p, "does not open") }); i >= 0 {
			t.Logf("without the cut, after %d crash points: %s", points, pl.problems[i])
			return
		}
	}
	t.Fatalf("%d torn crash points and the log always opened without the cut", points)
}

// countWarnings counts the warnings logged (the store's torn WAL cuts).
type countWarnings struct {
	slog.Handler
	n *atomic.Int64
}

func (c countWarnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		c.n.Add(1)
	}
	return c.Handler.Handle(ctx, r)
}
