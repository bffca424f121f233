package pull

// A byte budget for a blob store the nodes of a cluster share (StoreGC):
// each node publishes in etcd the blobs it holds (those of pulls and
// creates in flight, of images resolved in the last Grace, and of its
// sandboxes) with when it last held each; one node at a time (an etcd
// mutex) evicts the least recently used blobs no node holds and no stored
// environment or named layer names, until the store is within the budget.
//
// A blob is deleted only under a tombstone written in one etcd transaction
// with the check that no node's holds changed since the evictor read them;
// a node publishes a new hold only while no tombstone exists. So a node's
// hold either came first (the evictor sees it and keeps the blob) or waits
// for the deletion to end and then finds the blob missing (and fetches it
// again): no blob is deleted under a node that holds it.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// StoreGC keeps one node's holds on a shared blob store in etcd and evicts
// the store's least recently used blobs over Budget. Keys, under Prefix
// (ClaimsPrefix of the store):
//
//	gc/hold/NODE  the blobs NODE holds and when it last held each (storeHolds)
//	gc/deleting   the blobs an evictor is deleting (under its lease)
//	gc/seen       when the evictor first saw each blob no node ever held
//	gc/lock       the evictors' mutex
type StoreGC struct {
	Client *clientv3.Client
	Prefix string
	// EnvPrefix is the cluster's prefix ("" = "/dsec/"): the blobs that its
	// environments (env/) and named layers (layer/) name are never evicted.
	EnvPrefix string
	Node      string
	Blobs     blob.Store
	// Budget is the most bytes the store keeps (0: Evict does nothing).
	Budget int64
	// Grace keeps a blob held this long after its last use (a create that
	// resolved it may not have its sandbox yet) and a blob no node ever held
	// this long after the evictor first saw it (a fetch not yet recorded).
	Grace time.Duration
	Log   *slog.Logger

	io        sync.Mutex // orders publications
	mu        sync.Mutex
	pins      map[string]int       // held by pulls and creates in flight
	linger    map[string]time.Time // held until then (released pins)
	inUse     map[string]bool      // the node's sandboxes' blobs (Sync)
	published map[string]bool      // held in the node's etcd record
	used      map[string]int64     // last held, Unix ms
	evicting  atomic.Bool
}

// storeHolds is a node's gc/hold record.
type storeHolds struct {
	Held []string         `json:"held"`
	Used map[string]int64 `json:"used"` // digest → Unix ms of last hold
}

// forgetUsed drops a node's use times older than this (the blob, if still
// stored, is then only known to the evictor's first sighting).
const forgetUsed = 7 * 24 * time.Hour

func (g *StoreGC) key(k string) string {
	p := g.Prefix
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p + "gc/" + k
}

func (g *StoreGC) envPrefix() string {
	p := g.EnvPrefix
	if p == "" {
		p = "/dsec/"
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

func (g *StoreGC) log() *slog.Logger {
	if g.Log == nil {
		return slog.Default()
	}
	return g.Log
}

func (g *StoreGC) init() {
	if g.pins == nil {
		g.pins, g.linger, g.inUse, g.published, g.used = map[string]int{}, map[string]time.Time{}, map[string]bool{}, map[string]bool{}, map[string]int64{}
	}
}

func gcErr(err error, what string) error {
	return errdefs.Wrap(api.CodeUnavailable, err, "blob store budget (etcd): %s", what)
}

// Load reads the holds this node published in an earlier run (they stay
// until its first Sync).
func (g *StoreGC) Load(ctx context.Context) error {
	r, err := g.Client.Get(ctx, g.key("hold/"+g.Node))
	if err != nil {
		return gcErr(err, "read this node's holds")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	if len(r.Kvs) == 1 {
		var h storeHolds
		if json.Unmarshal(r.Kvs[0].Value, &h) == nil {
			until := time.Now().Add(g.Grace)
			for _, d := range h.Held {
				g.published[d], g.linger[d] = true, until
			}
			maps.Copy(g.used, h.Used)
		}
	}
	return nil
}

// Hold holds digests for the caller until release, then for Grace more;
// it returns those of them missing from the store once held (evicted
// before: the caller fetches them again). An eviction in progress is
// waited for.
func (g *StoreGC) Hold(ctx context.Context, digests []string) (release func(), missing []string, err error) {
	g.mu.Lock()
	g.init()
	need := false
	now := time.Now().UnixMilli()
	for _, d := range digests {
		g.pins[d]++
		g.used[d] = now
		need = need || !g.published[d]
	}
	g.mu.Unlock()
	release = func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		until := time.Now().Add(g.Grace)
		for _, d := range digests {
			if g.pins[d]--; g.pins[d] <= 0 {
				delete(g.pins, d)
			}
			if until.After(g.linger[d]) {
				g.linger[d] = until
			}
			g.used[d] = until.Add(-g.Grace).UnixMilli()
		}
	}
	if need {
		if err := g.publish(ctx); err != nil {
			release()
			return nil, nil, err
		}
	}
	for _, d := range digests {
		if _, err := g.Blobs.Stat(ctx, d); err != nil {
			if errdefs.CodeOf(err) != api.CodeNotFound {
				release()
				return nil, nil, err
			}
			missing = append(missing, d)
		}
	}
	return release, missing, nil
}

// Sync sets the blobs the node's sandboxes use, lets holds past their
// grace go and publishes the change.
func (g *StoreGC) Sync(ctx context.Context, inUse map[string]bool) error {
	g.mu.Lock()
	g.init()
	g.inUse = maps.Clone(inUse)
	now := time.Now()
	for d, until := range g.linger {
		if now.After(until) {
			delete(g.linger, d)
		}
	}
	held := g.heldLocked()
	changed := len(held) != len(g.published)
	for d := range g.published {
		if !held[d] {
			// Unpublished before the write: a Hold from now on publishes
			// it again (after this write).
			delete(g.published, d)
			changed = true
		}
	}
	g.mu.Unlock()
	if !changed {
		return nil
	}
	return g.publish(ctx)
}

// heldLocked is what the node holds now (g.mu held).
func (g *StoreGC) heldLocked() map[string]bool {
	held := map[string]bool{}
	for d := range g.pins {
		held[d] = true
	}
	for d := range g.linger {
		held[d] = true
	}
	for d := range g.inUse {
		held[d] = true
	}
	return held
}

// publish writes the node's holds, while no eviction is deleting (else it
// waits for the deletion to end and writes then).
func (g *StoreGC) publish(ctx context.Context) error {
	g.io.Lock()
	defer g.io.Unlock()
	for {
		g.mu.Lock()
		held := g.heldLocked()
		rec := storeHolds{Used: map[string]int64{}}
		old := time.Now().Add(-forgetUsed).UnixMilli()
		nowMs := time.Now().UnixMilli()
		for d, t := range g.used {
			if held[d] {
				t = nowMs
			}
			if t < old {
				delete(g.used, d)
				continue
			}
			rec.Used[d] = t
		}
		for d := range held {
			rec.Held = append(rec.Held, d)
		}
		g.mu.Unlock()
		sort.Strings(rec.Held)
		b, _ := json.Marshal(rec)
		del := g.key("deleting")
		t, err := g.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(del), "=", 0)).
			Then(clientv3.OpPut(g.key("hold/"+g.Node), string(b))).Else(clientv3.OpGet(del)).Commit()
		if err != nil {
			return gcErr(err, "publish this node's holds")
		}
		if t.Succeeded {
			g.mu.Lock()
			for _, d := range rec.Held {
				g.published[d] = true
			}
			g.mu.Unlock()
			return nil
		}
		kvs := t.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		if err := waitDeleted(ctx, g.Client, del, t.Header.Revision); err != nil {
			return gcErr(err, "wait for an eviction")
		}
	}
}

// waitDeleted waits until key, present at revision rev, is deleted.
func waitDeleted(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.Canceled
}

// Evicted is what one Evict did.
type Evicted struct {
	// Blobs are the digests deleted, least recently used first.
	Blobs []string
	// Bytes is the store's size before and after.
	Before, After int64
	// Busy says another node was evicting (this call did nothing).
	Busy bool
}

// evictTries bounds Evict's optimistic rounds (each retry means a node's
// holds or the environments changed while it chose).
const evictTries = 5

// Evict deletes the least recently used blobs no node holds and no
// environment or named layer names until the store is within Budget. One
// node evicts at a time; a call while another evicts returns Busy.
func (g *StoreGC) Evict(ctx context.Context) (Evicted, error) {
	var out Evicted
	if g.Budget <= 0 {
		return out, nil
	}
	sess, err := concurrency.NewSession(g.Client, concurrency.WithTTL(10), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return out, gcErr(err, "lease")
	}
	defer sess.Close()
	mu := concurrency.NewMutex(sess, g.key("lock"))
	if err := mu.TryLock(ctx); err != nil {
		if errors.Is(err, concurrency.ErrLocked) {
			out.Busy = true
			return out, nil
		}
		return out, gcErr(err, "evictor lock")
	}
	defer mu.Unlock(context.WithoutCancel(ctx))
	for range evictTries {
		done, err := g.evictOnce(ctx, sess.Lease(), &out)
		if err != nil || done {
			return out, err
		}
	}
	return out, errdefs.New(api.CodeUnavailable, "blob store budget: the nodes' holds kept changing; eviction left for the next round")
}

// evictOnce is one round of Evict; false: the holds changed meanwhile.
func (g *StoreGC) evictOnce(ctx context.Context, lease clientv3.LeaseID, out *Evicted) (bool, error) {
	digests, err := g.Blobs.List(ctx)
	if err != nil {
		return false, err
	}
	sizes := map[string]int64{}
	var total int64
	for _, d := range digests {
		n, err := g.Blobs.Stat(ctx, d)
		if err != nil {
			continue // deleted meanwhile
		}
		sizes[d] = n
		total += n
	}
	out.Before, out.After = total, total
	if total <= g.Budget {
		return true, nil
	}
	holdsPrefix := g.key("hold/")
	hr, err := g.Client.Get(ctx, holdsPrefix, clientv3.WithPrefix())
	if err != nil {
		return false, gcErr(err, "read the nodes' holds")
	}
	rev := hr.Header.Revision
	held := map[string]bool{}
	last := map[string]int64{}
	for _, kv := range hr.Kvs {
		var h storeHolds
		if json.Unmarshal(kv.Value, &h) != nil {
			continue
		}
		for _, d := range h.Held {
			held[d] = true
		}
		for d, t := range h.Used {
			last[d] = max(last[d], t)
		}
	}
	envs, layers := g.envPrefix()+"env/", g.envPrefix()+"layer/"
	protected := map[string]bool{}
	for _, pfx := range []string{envs, layers} {
		r, err := g.Client.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			return false, gcErr(err, "read the environments")
		}
		for _, kv := range r.Kvs {
			var ls []image.Layer
			if pfx == envs {
				m, err := image.ParseManifest(kv.Value)
				if err != nil {
					continue
				}
				ls = m.Layers
			} else {
				var l image.Layer
				if json.Unmarshal(kv.Value, &l) != nil {
					continue
				}
				ls = []image.Layer{l}
			}
			for _, l := range ls {
				protected[l.Digest], protected[l.Index], protected[l.PrefetchList] = true, true, true
			}
		}
	}
	seen := map[string]int64{}
	sr, err := g.Client.Get(ctx, g.key("seen"), clientv3.WithRev(rev))
	if err != nil {
		return false, gcErr(err, "read first sightings")
	}
	if len(sr.Kvs) == 1 {
		_ = json.Unmarshal(sr.Kvs[0].Value, &seen)
	}
	now := time.Now()
	nowMs, graceMs := now.UnixMilli(), g.Grace.Milliseconds()
	newSeen := map[string]int64{}
	type cand struct {
		d    string
		last int64
	}
	var cands []cand
	for d := range sizes {
		if held[d] || protected[d] {
			continue
		}
		t := last[d]
		if t == 0 {
			if seen[d] == 0 {
				seen[d] = nowMs
			}
			newSeen[d] = seen[d]
			t = seen[d]
		}
		if nowMs-t < graceMs {
			continue
		}
		cands = append(cands, cand{d, t})
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].last != cands[j].last {
			return cands[i].last < cands[j].last
		}
		return cands[i].d < cands[j].d
	})
	var victims []string
	after := total
	for _, c := range cands {
		if after <= g.Budget {
			break
		}
		victims = append(victims, c.d)
		after -= sizes[c.d]
		delete(newSeen, c.d)
	}
	sb, _ := json.Marshal(newSeen)
	vb, _ := json.Marshal(victims)
	ops := []clientv3.Op{clientv3.OpPut(g.key("seen"), string(sb))}
	if len(victims) > 0 {
		ops = append(ops, clientv3.OpPut(g.key("deleting"), string(vb), clientv3.WithLease(lease)))
	}
	t, err := g.Client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(holdsPrefix).WithPrefix(), "<", rev+1),
		clientv3.Compare(clientv3.ModRevision(envs).WithPrefix(), "<", rev+1),
		clientv3.Compare(clientv3.ModRevision(layers).WithPrefix(), "<", rev+1),
	).Then(ops...).Commit()
	if err != nil {
		return false, gcErr(err, "mark the blobs to evict")
	}
	if !t.Succeeded {
		return false, nil
	}
	if len(victims) == 0 {
		if total > g.Budget {
			g.log().Warn("blob store over its budget: the rest is held by a node, named by an environment, or used recently", "bytes", total, "budget", g.Budget)
		}
		return true, nil
	}
	var errs []error
	for _, d := range victims {
		if err := g.Blobs.Delete(ctx, d); err != nil && errdefs.CodeOf(err) != api.CodeNotFound {
			errs = append(errs, err)
			continue
		}
		out.Blobs = append(out.Blobs, d)
		out.After -= sizes[d]
	}
	// The tombstone goes last (a crash here: with the evictor's lease).
	if _, err := g.Client.Delete(context.WithoutCancel(ctx), g.key("deleting")); err != nil {
		errs = append(errs, gcErr(err, "end the eviction"))
	}
	g.log().Info("blob store over its budget: evicted the least recently used blobs", "blobs", len(out.Blobs), "before", out.Before, "after", out.After, "budget", g.Budget)
	return true, errors.Join(errs...)
}

// EvictSoon starts an Evict in the background unless one of this node's
// runs (errors are logged).
func (g *StoreGC) EvictSoon(ctx context.Context) {
	if g.Budget <= 0 || !g.evicting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer g.evicting.Store(false)
		if _, err := g.Evict(context.WithoutCancel(ctx)); err != nil {
			g.log().Warn("blob store eviction", "err", err)
		}
	}()
}

// Run syncs the node's holds every interval (inUse: the blobs its
// sandboxes use) and evicts every evictEvery, until ctx ends.
func (g *StoreGC) Run(ctx context.Context, interval, evictEvery time.Duration, inUse func() map[string]bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastEvict := time.Now()
	for {
		if err := g.Sync(ctx, inUse()); err != nil && ctx.Err() == nil {
			g.log().Warn("blob store holds", "err", err)
		}
		if time.Since(lastEvict) >= evictEvery {
			lastEvict = time.Now()
			g.EvictSoon(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
