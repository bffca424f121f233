package trajectory

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/dsec-dev/dsec/internal/datafmt"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Bucket layout: bucket "t" holds one bucket per trajectory ID with
//
//	"m"          the Meta (JSON)
//	"s" + N(BE)  step N's record (JSON)
//	"i" + N(BE)  step N's request body, when stored
//	"o" + N(BE)  step N's answer body
var bucketT = []byte("t")

// bucketV holds the store's format under the key "v".
var bucketV = []byte("v")

// Bolt is the embedded Store on go.etcd.io/bbolt: one file, fsync'd commits,
// grouped: one committer goroutine runs every update queued while the previous
// transaction was being written in the next transaction, so a lone update waits
// for one fsync and a crowd shares it.
//
// Every commit is fsync'd, a step's started mark too: a bbolt commit without
// fsync (NoSync) writes its meta page, which a power loss may keep without the
// pages it points to (bbolt then panics while opening the file, in a goroutine
// of its own, so the server cannot even report it), and lets the next commit
// overwrite pages the last fsync'd meta still points to. bbolt relies on each
// meta page reaching the disk after its pages and before the next commit's
// writes (boltloss_test.go).
type Bolt struct {
	db   *bolt.DB
	boot string

	queue   chan *update
	stop    chan struct{}
	closeMu sync.RWMutex
	closed  bool
	wg      sync.WaitGroup
	once    sync.Once

	opts boltOptions
}

// boltOptions are the tests' hooks into the committer.
type boltOptions struct {
	// afterCommit, when set, is called by the committer after each commit,
	// before its callers are answered; synced: bbolt fsync'd it.
	afterCommit func(synced bool)
	// noSync commits every transaction without fsync (a weakened store the
	// power-loss test must catch).
	noSync bool
	// noCheck opens the file without checking it first (checkBolt): the
	// damaged-file test shows bbolt panicking or faulting on it then.
	noCheck bool
}

type update struct {
	fn   func(tx *bolt.Tx) error
	done chan error
}

var _ Store = (*Bolt)(nil)

// OpenBolt opens (creating) the log at path. A damaged file (one bbolt would
// panic or fault on: truncated, meta pages torn, pages overwritten) is refused
// with an error wrapping ErrBoltDamaged that names the file and what to do,
// and is left as it is.
func OpenBolt(path string) (*Bolt, error) { return openBolt(path, boltOptions{}) }

// boltLockWait is how long an open waits for another live server holding the
// file's lock.
const boltLockWait = 5 * time.Second

func openBolt(path string, opts boltOptions) (*Bolt, error) {
	if !opts.noCheck {
		if err := checkBolt(path, boltLockWait); err != nil {
			return nil, err
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        boltLockWait,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("open trajectory log %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		// The format (datafmt.Trajectories) in bucket "v"; a file written
		// before it has none and is format 1.
		vb, err := tx.CreateBucketIfNotExists(bucketV)
		if err != nil {
			return err
		}
		if v := vb.Get(bucketV); v != nil {
			if err := datafmt.CheckNumber(path, v, datafmt.Trajectories); err != nil {
				return fmt.Errorf("open trajectory log: %w", err)
			}
		} else if err := vb.Put(bucketV, []byte(strconv.Itoa(datafmt.Trajectories))); err != nil {
			return err
		}
		_, err = tx.CreateBucketIfNotExists(bucketT)
		return err
	}); err != nil {
		db.Close()
		return nil, err
	}
	b := &Bolt{db: db, boot: NewBoot(), queue: make(chan *update, 4096), stop: make(chan struct{}), opts: opts}
	b.wg.Add(1)
	go b.committer()
	return b, nil
}

// Boot is this instance's ID (steps it started are in flight, not unknown).
func (b *Bolt) Boot() string { return b.boot }

// Close waits for queued updates and closes the file; later updates fail.
func (b *Bolt) Close() error {
	b.once.Do(func() {
		b.closeMu.Lock() // no enqueue is between its check and its send now
		b.closed = true
		b.closeMu.Unlock()
		close(b.stop)
	})
	b.wg.Wait()
	return b.db.Close()
}

// write runs fn in a durable read-write transaction. fn may run more than once
// (when a transaction it shares fails), so it must reset what it reports.
func (b *Bolt) write(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	u := &update{fn: fn, done: make(chan error, 1)}
	// A send racing Close would sit in the queue after the committer drained it.
	b.closeMu.RLock()
	if b.closed {
		b.closeMu.RUnlock()
		return errors.New("trajectory log is closed")
	}
	b.queue <- u // the committer runs until Close, which waits for this lock
	b.closeMu.RUnlock()
	// Not cancellable once queued: the caller must know whether it is durable.
	return <-u.done
}

const maxGroup = 2048

// committer commits queued updates in groups.
func (b *Bolt) committer() {
	defer b.wg.Done()
	group := make([]*update, 0, maxGroup)
	for {
		group = group[:0]
		select {
		case u := <-b.queue:
			group = append(group, u)
		case <-b.stop:
			for {
				select {
				case u := <-b.queue:
					u.done <- b.update(u.fn)
				default:
					return
				}
			}
		}
	drain:
		for len(group) < maxGroup {
			select {
			case u := <-b.queue:
				group = append(group, u)
			default:
				break drain
			}
		}
		err := b.update(func(tx *bolt.Tx) error {
			for _, u := range group {
				if err := u.fn(tx); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			for _, u := range group {
				u.done <- nil
			}
			continue
		}
		// One failed: run each alone so only it fails.
		for _, u := range group {
			u.done <- b.update(u.fn)
		}
	}
}

// update commits fn in one fsync'd transaction. Only the committer goroutine
// commits, so it alone sets and reads NoSync.
func (b *Bolt) update(fn func(tx *bolt.Tx) error) error {
	b.db.NoSync = b.opts.noSync
	err := b.db.Update(fn)
	if err == nil && b.opts.afterCommit != nil {
		b.opts.afterCommit(!b.db.NoSync)
	}
	return err
}

func stepKey(prefix byte, n int) []byte {
	k := make([]byte, 5)
	k[0] = prefix
	binary.BigEndian.PutUint32(k[1:], uint32(n))
	return k
}

func getMeta(tb *bolt.Bucket) (*Meta, error) { return decodeMeta(tb.Get([]byte("m"))) }

func putJSON(tb *bolt.Bucket, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return tb.Put(key, b)
}

// getStep reads step n's record (bodies included when withBodies).
func getStep(tb *bolt.Bucket, n int, withBodies bool) (*Step, error) {
	v := tb.Get(stepKey('s', n))
	if v == nil {
		return nil, nil
	}
	s, err := decodeStep(v, n)
	if err != nil {
		return nil, err
	}
	if withBodies {
		if in := tb.Get(stepKey('i', n)); in != nil {
			s.Input = slices.Clone(in)
		}
		if s.Result != nil {
			if out := tb.Get(stepKey('o', n)); out != nil {
				s.Result.Body = slices.Clone(out)
			}
		}
	}
	return s, nil
}

// Begin implements Store.
func (b *Bolt) Begin(ctx context.Context, req BeginRequest) (Decision, error) {
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	// Fast path without a write: a replay (or an answer-only error) of a logged step.
	var dec Decision
	var derr error
	decided := false
	if err := b.db.View(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketT).Bucket([]byte(req.Trajectory))
		if tb == nil {
			return nil
		}
		meta, err := getMeta(tb)
		if err != nil {
			return err
		}
		cur, err := getStep(tb, req.N, false)
		if err != nil || cur == nil {
			return err
		}
		replay, live, err := Decide(meta, cur, req, b.boot)
		if live {
			return nil
		}
		decided = true
		if err != nil {
			derr = err
			return nil
		}
		full, err := getStep(tb, req.N, true)
		dec.Replay = full
		_ = replay
		return err
	}); err != nil {
		return Decision{}, err
	}
	if decided {
		return dec, derr
	}
	err := b.write(ctx, func(tx *bolt.Tx) error {
		dec, derr = Decision{}, nil
		top := tx.Bucket(bucketT)
		tb := top.Bucket([]byte(req.Trajectory))
		var meta *Meta
		var cur *Step
		if tb != nil {
			var err error
			if meta, err = getMeta(tb); err != nil {
				return err
			}
			if cur, err = getStep(tb, req.N, true); err != nil {
				return err
			}
		}
		replay, live, err := Decide(meta, cur, req, b.boot)
		if err != nil || !live {
			dec.Replay, derr = replay, err
			return nil
		}
		if meta == nil {
			if tb, err = top.CreateBucket([]byte(req.Trajectory)); err != nil {
				return err
			}
		}
		meta, dec.New = startMeta(meta, req)
		if err := putJSON(tb, []byte("m"), meta); err != nil {
			return err
		}
		if req.InputStored && len(req.Input) > 0 {
			if err := tb.Put(stepKey('i', req.N), req.Input); err != nil {
				return err
			}
		}
		return putJSON(tb, stepKey('s', req.N), startedStep(req, b.boot))
	})
	if err != nil {
		return Decision{}, errdefs.Internal(err, "trajectory log")
	}
	return dec, derr
}

// Finish implements Store.
func (b *Bolt) Finish(ctx context.Context, traj string, n int, res Result, now time.Time) error {
	var ferr error
	err := b.write(ctx, func(tx *bolt.Tx) error {
		ferr = nil
		tb := tx.Bucket(bucketT).Bucket([]byte(traj))
		if tb == nil {
			ferr = notStarted(traj, n)
			return nil
		}
		s, err := getStep(tb, n, false)
		if err != nil {
			return err
		}
		if !finishable(s, b.boot) {
			ferr = notStarted(traj, n)
			return nil
		}
		if body := finishStep(s, res, now); body != nil {
			if err := tb.Put(stepKey('o', n), body); err != nil {
				return err
			}
		}
		// The meta's UpdatedAt was set by Begin: leaving the meta alone keeps
		// Finish to the step's own pages.
		return putJSON(tb, stepKey('s', n), s)
	})
	if err != nil {
		return errdefs.Internal(err, "trajectory log")
	}
	return ferr
}

// Abort implements Store.
func (b *Bolt) Abort(ctx context.Context, traj string, n int, mode AbortMode) error {
	var aerr error
	err := b.write(ctx, func(tx *bolt.Tx) error {
		aerr = nil
		top := tx.Bucket(bucketT)
		tb := top.Bucket([]byte(traj))
		if tb == nil {
			aerr = notStarted(traj, n)
			return nil
		}
		s, err := getStep(tb, n, false)
		if err != nil {
			return err
		}
		if !abortable(s) {
			aerr = notStarted(traj, n)
			return nil
		}
		if mode == MarkUnknown {
			s.State = api.StepUnknown
			return putJSON(tb, stepKey('s', n), s)
		}
		for _, p := range []byte{'s', 'i', 'o'} {
			if err := tb.Delete(stepKey(p, n)); err != nil {
				return err
			}
		}
		meta, err := getMeta(tb)
		if err != nil {
			return err
		}
		gone, _ := rollbackMeta(meta, n, func() (int, error) {
			c := tb.Cursor()
			for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
				if len(k) == 5 && k[0] == 's' {
					return int(binary.BigEndian.Uint32(k[1:])), nil
				}
			}
			return 0, nil
		})
		if gone {
			return top.DeleteBucket([]byte(traj))
		}
		return putJSON(tb, []byte("m"), meta)
	})
	if err != nil {
		return errdefs.Internal(err, "trajectory log")
	}
	return aerr
}

// Get implements Store.
func (b *Bolt) Get(ctx context.Context, traj string) (Meta, []Step, error) {
	var meta *Meta
	var steps []Step
	err := b.db.View(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketT).Bucket([]byte(traj))
		if tb == nil {
			return notFound(traj)
		}
		var err error
		if meta, err = getMeta(tb); err != nil {
			return err
		}
		c := tb.Cursor()
		for k, _ := c.Seek([]byte{'s'}); k != nil && k[0] == 's'; k, _ = c.Next() {
			s, err := getStep(tb, int(binary.BigEndian.Uint32(k[1:])), true)
			if err != nil {
				return err
			}
			s.State = EffectiveState(s, b.boot)
			steps = append(steps, *s)
		}
		return nil
	})
	if err != nil {
		return Meta{}, nil, err
	}
	return *meta, steps, nil
}

// List implements Store.
func (b *Bolt) List(ctx context.Context) ([]Meta, error) {
	var out []Meta
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketT).ForEachBucket(func(k []byte) error {
			m, err := getMeta(tx.Bucket(bucketT).Bucket(k))
			if err != nil {
				return err
			}
			out = append(out, *m)
			return nil
		})
	})
	return out, err
}

// Delete implements Store.
func (b *Bolt) Delete(ctx context.Context, traj string) error {
	var derr error
	err := b.write(ctx, func(tx *bolt.Tx) error {
		derr = nil
		top := tx.Bucket(bucketT)
		if top.Bucket([]byte(traj)) == nil {
			derr = notFound(traj)
			return nil
		}
		return top.DeleteBucket([]byte(traj))
	})
	if err != nil {
		return errdefs.Internal(err, "trajectory log")
	}
	return derr
}

// Tally implements Store.
func (b *Bolt) Tally(ctx context.Context, traj string, t Tally) error {
	err := b.write(ctx, func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketT).Bucket([]byte(traj))
		if tb == nil {
			return nil
		}
		meta, err := getMeta(tb)
		if err != nil {
			return err
		}
		tally(meta, t)
		return putJSON(tb, []byte("m"), meta)
	})
	if err != nil {
		return errdefs.Internal(err, "trajectory log")
	}
	return nil
}

// Rebind implements Store.
func (b *Bolt) Rebind(ctx context.Context, traj, sandboxID string, now time.Time) error {
	var rerr error
	err := b.write(ctx, func(tx *bolt.Tx) error {
		rerr = nil
		tb := tx.Bucket(bucketT).Bucket([]byte(traj))
		if tb == nil {
			rerr = notFound(traj)
			return nil
		}
		meta, err := getMeta(tb)
		if err != nil {
			return err
		}
		rebind(meta, sandboxID, now)
		return putJSON(tb, []byte("m"), meta)
	})
	if err != nil {
		return errdefs.Internal(err, "trajectory log")
	}
	return rerr
}

// Prune implements Store.
func (b *Bolt) Prune(ctx context.Context, olderThan time.Time, maxN int) (int, error) {
	metas, err := b.List(ctx)
	if err != nil {
		return 0, err
	}
	victims := pruneVictims(metas, olderThan, maxN)
	for len(victims) > 0 {
		chunk := victims[:min(len(victims), 1000)]
		victims = victims[len(chunk):]
		if err := b.write(ctx, func(tx *bolt.Tx) error {
			top := tx.Bucket(bucketT)
			for _, id := range chunk {
				if top.Bucket([]byte(id)) != nil {
					if err := top.DeleteBucket([]byte(id)); err != nil {
						return err
					}
				}
			}
			return nil
		}); err != nil {
			return 0, err
		}
	}
	return len(pruneVictims(metas, olderThan, maxN)), nil
}

// Path is the log's file.
func (b *Bolt) Path() string { return b.db.Path() }
