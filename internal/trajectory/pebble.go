package trajectory

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/dsec-dev/dsec/internal/datafmt"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Key layout of the Pebble store (one keyspace, bytewise order):
//
//	'm' ID                   the Meta (JSON)
//	's' ID 0x00 N(BE32) k    step N: k = 'r' its record (JSON), 'i' its request
//	                         body when stored, 'o' its answer body
//	'v'                      the store's format (datafmt.Trajectories, decimal;
//	                         absent in stores written before it: format 1)
//
// An ID never contains 0x00, so 's' ID 0x00 prefixes exactly one trajectory's
// steps, in step order: Get and Delete are one range, List reads only 'm' keys.
const (
	kindInput  = 'i'
	kindOutput = 'o'
	kindRecord = 'r'
)

func metaKey(id string) []byte { return append([]byte{'m'}, id...) }

// stepsPrefix is the prefix of trajectory id's step keys.
func stepsPrefix(id string) []byte {
	k := make([]byte, 0, len(id)+7)
	return append(append(append(k, 's'), id...), 0)
}

// prefixEnd is the first key after every key with prefix p (p ends in 0x00 or
// is "m": never all 0xff).
func prefixEnd(p []byte) []byte {
	e := slices.Clone(p)
	e[len(e)-1]++
	return e
}

func pebbleStepKey(id string, n int, kind byte) []byte {
	return append(binary.BigEndian.AppendUint32(stepsPrefix(id), uint32(n)), kind)
}

// parseStepKey splits a key under prefix (a stepsPrefix) into step and kind.
func parseStepKey(prefix, key []byte) (n int, kind byte, ok bool) {
	if len(key) != len(prefix)+5 || !bytes.HasPrefix(key, prefix) {
		return 0, 0, false
	}
	v := binary.BigEndian.Uint32(key[len(prefix):])
	kind = key[len(key)-1]
	if v < 1 || v > MaxStep || (kind != kindInput && kind != kindOutput && kind != kindRecord) {
		return 0, 0, false
	}
	return int(v), kind, true
}

// PebbleOptions configure OpenPebble. Memory is about MemTableSize times 2
// (one memtable being written, one being flushed) plus CacheSize.
type PebbleOptions struct {
	MemTableSize uint64 // default 4 MiB
	CacheSize    int64  // default 8 MiB
	// DiskReserve is the free space on its file system below which the log
	// refuses new steps (diskguard.go); default DefaultDiskReserve.
	DiskReserve int64
	// Logger gets Pebble's errors (default slog.Default()).
	Logger *slog.Logger
	// SyncDelay makes every fsync of a WAL file take this much longer: a
	// simulated slow disk, for benchmarks (`dsec bench traj`). Zero in use.
	SyncDelay time.Duration
	fs        vfs.FS // tests: under the lazy WAL (default vfs.Default)
	keepTorn  bool   // tests: do not cut a torn WAL (walrepair.go)
}

// Pebble is the embedded default Store on github.com/cockroachdb/pebble: a WAL
// fsync'd once per commit group (WAL files are recycled, so the fsync is of
// preallocated space), memtables flushed to sstables in the background.
//
// Every write takes the lock of its trajectory (16384 stripes), reads, decides,
// commits its batch and, when durable, waits for a group fsync before it
// unlocks, so that no replay answers from a record before it is on disk (Get
// and List, which take no lock, wait for a sync while a durable write is in
// between); writes of other trajectories share the fsyncs. Finish, Abort,
// Delete, Rebind and Prune wait for an fsync. Begin waits until the WAL writer
// has written its started mark to the WAL file and never for an fsync
// (lazyWALFS; a Pebble NoSync write would stay in the writer's memory until
// the next sync or a full 32 KiB block, which a process crash loses).
type Pebble struct {
	db       *pebble.DB
	fs       *lazyWALFS
	dir      string
	boot     string
	reserve  int64                    // PebbleOptions.DiskReserve
	roomSeen atomic.Pointer[roomSeen] // diskguard.go

	locks [16384]sync.Mutex
	// mu guards closed; operations hold it shared.
	mu     sync.RWMutex
	closed bool
}

var _ Store = (*Pebble)(nil)

var errClosed = errors.New("trajectory log is closed")

// OpenPebble opens (creating) the log in directory dir.
func OpenPebble(dir string, o PebbleOptions) (*Pebble, error) {
	if o.MemTableSize == 0 {
		o.MemTableSize = 4 << 20
	}
	if o.CacheSize == 0 {
		o.CacheSize = 8 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DiskReserve == 0 {
		o.DiskReserve = DefaultDiskReserve
	}
	cache := pebble.NewCache(o.CacheSize)
	defer cache.Unref()
	if o.fs == nil {
		o.fs = vfs.Default
	}
	if o.SyncDelay > 0 {
		o.fs = walFS{FS: o.fs, wrap: func(f vfs.File) vfs.File { return &slowSyncFile{f, o.SyncDelay} }}
	}
	fs := newLazyWALFS(o.fs)
	open := func() (*pebble.DB, error) {
		return pebble.Open(dir, &pebble.Options{
			FS:                 fs,
			Cache:              cache,
			MemTableSize:       o.MemTableSize,
			MaxOpenFiles:       256,
			FormatMajorVersion: pebble.FormatNewest,
			Logger:             pebbleLogger{o.Logger},
		})
	}
	db, err := open()
	if pebble.IsCorruptionError(err) && !o.keepTorn {
		// A WAL torn by a power loss (walrepair.go): cut its unsynced tail.
		cuts, cerr := cutTornWAL(o.fs, dir)
		for _, c := range cuts {
			o.Logger.Warn("trajectory log: cut a WAL file torn by a power loss (writes that were never fsynced, so never answered)",
				"file", c.File, "at", c.At, "dropped_bytes", c.Dropped)
		}
		if cerr == nil && len(cuts) > 0 {
			db, err = open()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open trajectory log %s: %w", dir, err)
	}
	if err := checkPebbleFormat(db, dir); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Pebble{db: db, fs: fs, dir: dir, boot: NewBoot(), reserve: o.DiskReserve}, nil
}

// formatKey holds the store's format.
var formatKey = []byte{'v'}

// checkPebbleFormat refuses a store of a later format (leaving it as it is)
// and marks one without a format as this build's.
func checkPebbleFormat(db *pebble.DB, dir string) error {
	v, closer, err := db.Get(formatKey)
	if errors.Is(err, pebble.ErrNotFound) {
		if err := db.Set(formatKey, []byte(strconv.Itoa(datafmt.Trajectories)), pebble.Sync); err != nil {
			return fmt.Errorf("open trajectory log %s: mark its format: %w", dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("open trajectory log %s: read its format: %w", dir, err)
	}
	defer closer.Close()
	if err := datafmt.CheckNumber(dir, v, datafmt.Trajectories); err != nil {
		return fmt.Errorf("open trajectory log: %w", err)
	}
	return nil
}

// pebbleLogger passes Pebble's errors to slog and drops its information lines.
type pebbleLogger struct{ l *slog.Logger }

func (pebbleLogger) Infof(string, ...any) {}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("trajectory log: " + fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error("trajectory log: fatal: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}

// Boot is this instance's ID (steps it started are in flight, not unknown).
func (p *Pebble) Boot() string { return p.boot }

// Path is the log's directory.
func (p *Pebble) Path() string { return p.dir }

// Close waits for running operations and pending syncs, and closes the log.
func (p *Pebble) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.fs.force.Store(true) // a clean close leaves every mark on disk
	return p.db.Close()
}

// enter admits an operation until Close; leave ends it.
func (p *Pebble) enter() error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return errClosed
	}
	return nil
}

func (p *Pebble) leave() { p.mu.RUnlock() }

// lock locks trajectory id's stripe and returns its unlock.
func (p *Pebble) lock(id string) func() {
	h := fnv.New32a()
	h.Write([]byte(id))
	m := &p.locks[h.Sum32()%uint32(len(p.locks))]
	m.Lock()
	return m.Unlock
}

// lockAll locks every stripe (in order) and returns the unlock.
func (p *Pebble) lockAll() func() {
	for i := range p.locks {
		p.locks[i].Lock()
	}
	return func() {
		for i := range p.locks {
			p.locks[i].Unlock()
		}
	}
}

// commit commits b (written to the WAL file: lazyWALFS skips the WAL writer's
// fsyncs), waits for a group fsync when durable, then unlocks. The caller is
// inside enter.
func (p *Pebble) commit(b *pebble.Batch, unlock func(), durable bool) error {
	if err := p.room(b.Len(), durable); err != nil {
		unlock()
		b.Close()
		return err
	}
	if durable {
		p.fs.durable.Add(1)
		defer p.fs.durable.Add(-1)
	}
	err := b.Commit(pebble.Sync) // written: lazyWALFS skips the WAL writer's fsync
	if err == nil && durable {
		err = p.fs.syncDurable()
	}
	unlock()
	b.Close()
	return err
}

// settled waits, when a durable write is between its commit and its fsync,
// for a sync: a reader outside the trajectory locks sees no result a power
// loss could take back.
func (p *Pebble) settled() error {
	if p.fs.durable.Load() == 0 {
		return nil
	}
	return p.fs.syncDurable()
}

// get returns a copy of key's value, nil if none.
func get(r pebble.Reader, key []byte) ([]byte, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return slices.Clone(v), nil
}

// readMeta returns trajectory id's meta, nil if none.
func readMeta(r pebble.Reader, id string) (*Meta, error) {
	v, err := get(r, metaKey(id))
	if err != nil || v == nil {
		return nil, err
	}
	return decodeMeta(v)
}

// readStep returns step n's record (without bodies), nil if none.
func readStep(r pebble.Reader, id string, n int) (*Step, error) {
	v, err := get(r, pebbleStepKey(id, n, kindRecord))
	if err != nil || v == nil {
		return nil, err
	}
	return decodeStep(v, n)
}

// readBodies fills s's request and answer bodies.
func readBodies(r pebble.Reader, s *Step) error {
	in, err := get(r, pebbleStepKey(s.Trajectory, s.N, kindInput))
	if err != nil {
		return err
	}
	s.Input = in
	if s.Result != nil {
		if s.Result.Body, err = get(r, pebbleStepKey(s.Trajectory, s.N, kindOutput)); err != nil {
			return err
		}
	}
	return nil
}

func setJSON(b *pebble.Batch, key []byte, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Set(key, j, nil)
}

// Begin implements Store.
func (p *Pebble) Begin(ctx context.Context, req BeginRequest) (Decision, error) {
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	if err := p.enter(); err != nil {
		return Decision{}, errdefs.Internal(err, "trajectory log")
	}
	defer p.leave()
	unlock := p.lock(req.Trajectory)
	meta, replay, live, err := p.decide(req)
	if err != nil || !live {
		unlock()
		return Decision{Replay: replay}, err
	}
	meta, created := startMeta(meta, req)
	b := p.db.NewBatch()
	if req.InputStored && len(req.Input) > 0 {
		err = b.Set(pebbleStepKey(req.Trajectory, req.N, kindInput), req.Input, nil)
	}
	if err == nil {
		err = setJSON(b, metaKey(req.Trajectory), meta)
	}
	if err == nil {
		err = setJSON(b, pebbleStepKey(req.Trajectory, req.N, kindRecord), startedStep(req, p.boot))
	}
	if err != nil {
		unlock()
		b.Close()
	} else {
		err = p.commit(b, unlock, false)
	}
	if err != nil {
		return Decision{}, logError(err)
	}
	return Decision{New: created}, nil
}

// decide applies Decide to the logged state (under the trajectory's lock): the
// meta a live step updates, or the step to replay (with bodies).
func (p *Pebble) decide(req BeginRequest) (meta *Meta, replay *Step, live bool, err error) {
	meta, err = readMeta(p.db, req.Trajectory)
	var cur *Step
	if err == nil && meta != nil {
		cur, err = readStep(p.db, req.Trajectory, req.N)
	}
	if err != nil {
		return nil, nil, false, errdefs.Internal(err, "trajectory log")
	}
	replay, live, err = Decide(meta, cur, req, p.boot)
	if err != nil || live {
		return meta, nil, live, err
	}
	if err := readBodies(p.db, replay); err != nil {
		return nil, nil, false, errdefs.Internal(err, "trajectory log")
	}
	return nil, replay, false, nil
}

// update runs fn under trajectory id's lock: fn fills b, or returns an answer
// (not_found, conflict) that cancels the write. It waits for the fsync.
func (p *Pebble) update(id string, fn func(b *pebble.Batch) (answer, err error)) error {
	if err := p.enter(); err != nil {
		return errdefs.Internal(err, "trajectory log")
	}
	defer p.leave()
	unlock := p.lock(id)
	b := p.db.NewBatch()
	answer, err := fn(b)
	if err == nil && answer == nil {
		err = p.commit(b, unlock, true)
	} else {
		unlock()
		b.Close()
	}
	if err != nil {
		return logError(err)
	}
	return answer
}

// Finish implements Store.
func (p *Pebble) Finish(ctx context.Context, traj string, n int, res Result, now time.Time) error {
	return p.update(traj, func(b *pebble.Batch) (error, error) {
		s, err := readStep(p.db, traj, n)
		if err != nil {
			return nil, err
		}
		if !finishable(s, p.boot) {
			return notStarted(traj, n), nil
		}
		if body := finishStep(s, res, now); body != nil {
			if err := b.Set(pebbleStepKey(traj, n, kindOutput), body, nil); err != nil {
				return nil, err
			}
		}
		// The meta's UpdatedAt was set by Begin.
		return nil, setJSON(b, pebbleStepKey(traj, n, kindRecord), s)
	})
}

// Abort implements Store.
func (p *Pebble) Abort(ctx context.Context, traj string, n int, mode AbortMode) error {
	return p.update(traj, func(b *pebble.Batch) (error, error) {
		s, err := readStep(p.db, traj, n)
		if err != nil {
			return nil, err
		}
		if !abortable(s) {
			return notStarted(traj, n), nil
		}
		if mode == MarkUnknown {
			s.State = api.StepUnknown
			return nil, setJSON(b, pebbleStepKey(traj, n, kindRecord), s)
		}
		meta, err := readMeta(p.db, traj)
		if err == nil && meta == nil {
			err = errors.New("trajectory record without meta")
		}
		if err != nil {
			return nil, err
		}
		gone, err := rollbackMeta(meta, n, func() (int, error) { return p.lastStep(traj, n) })
		if err != nil {
			return nil, err
		}
		if gone {
			return nil, deleteTraj(b, traj)
		}
		for _, k := range []byte{kindInput, kindOutput, kindRecord} {
			if err := b.Delete(pebbleStepKey(traj, n, k), nil); err != nil {
				return nil, err
			}
		}
		return nil, setJSON(b, metaKey(traj), meta)
	})
}

// lastStep is the highest step of trajectory id other than skip (0: none).
func (p *Pebble) lastStep(id string, skip int) (int, error) {
	prefix := stepsPrefix(id)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	for ok := it.Last(); ok; ok = it.Prev() {
		if n, kind, ok := parseStepKey(prefix, it.Key()); ok && kind == kindRecord && n != skip {
			return n, nil
		}
	}
	return 0, it.Error()
}

// deleteTraj adds the deletion of trajectory id to b.
func deleteTraj(b *pebble.Batch, id string) error {
	prefix := stepsPrefix(id)
	if err := b.DeleteRange(prefix, prefixEnd(prefix), nil); err != nil {
		return err
	}
	return b.Delete(metaKey(id), nil)
}

// Get implements Store.
func (p *Pebble) Get(ctx context.Context, traj string) (Meta, []Step, error) {
	if err := p.enter(); err != nil {
		return Meta{}, nil, err
	}
	defer p.leave()
	snap := p.db.NewSnapshot()
	defer snap.Close()
	if err := p.settled(); err != nil {
		return Meta{}, nil, err
	}
	meta, err := readMeta(snap, traj)
	if err != nil {
		return Meta{}, nil, err
	}
	if meta == nil {
		return Meta{}, nil, notFound(traj)
	}
	prefix := stepsPrefix(traj)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return Meta{}, nil, err
	}
	defer it.Close()
	var steps []Step
	var in, out []byte // the bodies of step bodyN, which precede its record
	bodyN := 0
	for it.First(); it.Valid(); it.Next() {
		n, kind, ok := parseStepKey(prefix, it.Key())
		if !ok {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return Meta{}, nil, err
		}
		if n != bodyN {
			in, out, bodyN = nil, nil, n
		}
		switch kind {
		case kindInput:
			in = slices.Clone(v)
		case kindOutput:
			out = slices.Clone(v)
		case kindRecord:
			s, err := decodeStep(v, n)
			if err != nil {
				return Meta{}, nil, err
			}
			s.Input = in
			if s.Result != nil {
				s.Result.Body = out
			}
			s.State = EffectiveState(s, p.boot)
			steps = append(steps, *s)
		}
	}
	if err := it.Error(); err != nil {
		return Meta{}, nil, err
	}
	return *meta, steps, nil
}

// List implements Store.
func (p *Pebble) List(ctx context.Context) ([]Meta, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'m'}, UpperBound: []byte{'m' + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if err := p.settled(); err != nil {
		return nil, err
	}
	var out []Meta
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		m, err := decodeMeta(v)
		if err != nil {
			return nil, err
		}
		out = append(out, *m)
	}
	return out, it.Error()
}

// Delete implements Store.
func (p *Pebble) Delete(ctx context.Context, traj string) error {
	return p.update(traj, func(b *pebble.Batch) (error, error) {
		meta, err := readMeta(p.db, traj)
		if err != nil || meta == nil {
			return notFound(traj), err
		}
		return nil, deleteTraj(b, traj)
	})
}

// Rebind implements Store.
func (p *Pebble) Rebind(ctx context.Context, traj, sandboxID string, now time.Time) error {
	return p.update(traj, func(b *pebble.Batch) (error, error) {
		meta, err := readMeta(p.db, traj)
		if err != nil || meta == nil {
			return notFound(traj), err
		}
		rebind(meta, sandboxID, now)
		return nil, setJSON(b, metaKey(traj), meta)
	})
}

// Tally implements Store: a lazy write, like a step's start.
func (p *Pebble) Tally(ctx context.Context, traj string, t Tally) error {
	if err := p.enter(); err != nil {
		return errdefs.Internal(err, "trajectory log")
	}
	defer p.leave()
	unlock := p.lock(traj)
	meta, err := readMeta(p.db, traj)
	if err == nil && meta != nil {
		tally(meta, t)
		b := p.db.NewBatch()
		if err = setJSON(b, metaKey(traj), meta); err != nil {
			b.Close()
		} else {
			err = p.commit(b, func() {}, false)
		}
	}
	unlock()
	if err != nil {
		return logError(err)
	}
	return nil
}

// Prune implements Store.
func (p *Pebble) Prune(ctx context.Context, olderThan time.Time, maxN int) (int, error) {
	metas, err := p.List(ctx)
	if err != nil {
		return 0, err
	}
	victims := pruneVictims(metas, olderThan, maxN)
	for rest := victims; len(rest) > 0; {
		chunk := rest[:min(len(rest), 1000)]
		rest = rest[len(chunk):]
		if err := p.enter(); err != nil {
			return 0, err
		}
		b := p.db.NewBatch()
		unlock := p.lockAll()
		for _, id := range chunk {
			if err == nil {
				err = deleteTraj(b, id)
			}
		}
		if err == nil {
			err = p.commit(b, unlock, true)
		} else {
			unlock()
			b.Close()
		}
		p.leave()
		if err != nil {
			return 0, logError(err)
		}
	}
	return len(victims), nil
}

// Import writes a trajectory read from another store (as its Get returns it),
// replacing any with its ID. It is not synced: Flush after the last one.
func (p *Pebble) Import(meta Meta, steps []Step) error {
	if err := p.enter(); err != nil {
		return err
	}
	defer p.leave()
	unlock := p.lock(meta.ID)
	defer unlock()
	b := p.db.NewBatch()
	defer b.Close()
	err := deleteTraj(b, meta.ID)
	if err == nil {
		err = setJSON(b, metaKey(meta.ID), meta)
	}
	for _, s := range steps {
		if s.InputStored && len(s.Input) > 0 && err == nil {
			err = b.Set(pebbleStepKey(meta.ID, s.N, kindInput), s.Input, nil)
		}
		if s.Result != nil {
			if len(s.Result.Body) > 0 && err == nil {
				err = b.Set(pebbleStepKey(meta.ID, s.N, kindOutput), s.Result.Body, nil)
			}
			r := *s.Result
			r.Body = nil
			s.Result = &r
		}
		if err == nil {
			err = setJSON(b, pebbleStepKey(meta.ID, s.N, kindRecord), s)
		}
	}
	if err == nil {
		err = p.room(b.Len(), true)
	}
	if err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}

// Flush makes every write durable (after Import).
func (p *Pebble) Flush() error {
	if err := p.enter(); err != nil {
		return err
	}
	defer p.leave()
	return p.db.Flush()
}
