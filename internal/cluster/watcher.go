package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/cluster/placement"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	Client *clientv3.Client
	Prefix string // default DefaultPrefix
	Secret Secret
	Logger *slog.Logger
}

// Watcher is an API server's live view of the node registry: it lists the n/
// keys once and then follows their changes. It implements placement.Source.
type Watcher struct {
	cfg WatcherConfig
	k   keys

	mu    sync.RWMutex
	live  map[string]NodeRecord
	known map[string]NodeRecord
	// last holds a lost node's last live record (its last load report, as
	// this watcher saw it), shown instead of its known record.
	last     map[string]NodeRecord
	drain    map[string]bool
	observed map[string]time.Time
	// untrusted counts records ignored because they do not verify, by key.
	untrusted map[string]string
	rev       int64
	// lost holds, per live node, a channel closed when the node is lost.
	lost map[string]chan struct{}
}

// NewWatcher lists the registry and follows it until ctx ends.
func NewWatcher(ctx context.Context, cfg WatcherConfig) (*Watcher, error) {
	if cfg.Client == nil || cfg.Secret.IsZero() {
		return nil, fmt.Errorf("cluster: NewWatcher needs Client and Secret")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watcher{cfg: cfg, k: newKeys(cfg.Prefix), lost: map[string]chan struct{}{}, last: map[string]NodeRecord{}}
	if err := w.list(ctx); err != nil {
		return nil, err
	}
	go w.follow(ctx)
	return w, nil
}

// list replaces the view with a fresh listing.
func (w *Watcher) list(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := w.cfg.Client.Get(cctx, w.k.nodes(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("cluster: list nodes: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.live, w.known, w.drain = map[string]NodeRecord{}, map[string]NodeRecord{}, map[string]bool{}
	w.observed, w.untrusted = map[string]time.Time{}, map[string]string{}
	now := time.Now()
	for _, kv := range resp.Kvs {
		w.applyLocked(string(kv.Key), kv.Value, false, now)
	}
	w.rev = resp.Header.Revision
	for name, ch := range w.lost {
		if _, live := w.live[name]; !live {
			close(ch)
			delete(w.lost, name)
		}
	}
	return nil
}

// follow watches from the listed revision, listing again when the watch breaks
// (compaction, lost leader).
func (w *Watcher) follow(ctx context.Context) {
	for ctx.Err() == nil {
		w.mu.RLock()
		rev := w.rev
		w.mu.RUnlock()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := w.cfg.Client.Watch(wctx, w.k.nodes(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range ch {
			if err := resp.Err(); err != nil {
				w.cfg.Logger.Warn("node registry watch broke; listing again", "err", err)
				break
			}
			now := time.Now()
			w.mu.Lock()
			for _, ev := range resp.Events {
				w.applyLocked(string(ev.Kv.Key), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete, now)
			}
			w.rev = resp.Header.Revision
			w.mu.Unlock()
		}
		cancel()
		for ctx.Err() == nil {
			if err := w.list(ctx); err == nil {
				break
			} else {
				w.cfg.Logger.Warn("listing the node registry failed; retrying", "err", err)
			}
			sleep(ctx, time.Second)
		}
	}
}

func (w *Watcher) applyLocked(key string, val []byte, deleted bool, now time.Time) {
	kind, name, ok := w.k.nodeKey(key)
	if !ok {
		return
	}
	if kind == "drain" {
		if deleted {
			delete(w.drain, name)
		} else {
			w.drain[name] = true
		}
		return
	}
	m := w.live
	if kind == "known" {
		m = w.known
	} else if kind != "live" {
		return
	}
	if deleted {
		if rec, ok := m[name]; ok && kind == "live" {
			w.last[name] = rec
		} else if kind == "known" {
			delete(w.last, name)
		}
		delete(m, name)
		delete(w.untrusted, key)
		if ch, ok := w.lost[name]; ok && kind == "live" {
			close(ch)
			delete(w.lost, name)
		}
		return
	}
	var rec NodeRecord
	if err := w.cfg.Secret.open(val, &rec); err != nil || rec.Name != name {
		if err == nil {
			err = fmt.Errorf("record names node %q", rec.Name)
		}
		if _, seen := w.untrusted[key]; !seen {
			w.cfg.Logger.Warn("ignoring a node record that does not verify (wrong cluster secret?)", "key", key, "err", err)
		}
		w.untrusted[key] = err.Error()
		delete(m, name)
		return
	}
	delete(w.untrusted, key)
	m[name] = rec
	if kind == "live" {
		w.observed[name] = now
	}
}

// Node returns the named node's status; ok is false for a node the registry
// never held (or whose records do not verify).
func (w *Watcher) Node(name string) (NodeStatus, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.statusLocked(name)
}

func (w *Watcher) statusLocked(name string) (NodeStatus, bool) {
	rec, live := w.live[name]
	if !live {
		k, ok := w.known[name]
		if !ok {
			return NodeStatus{}, false
		}
		rec = k
		if l, ok := w.last[name]; ok {
			rec = l
		}
	}
	s := NodeStatus{NodeRecord: rec, Draining: w.drain[name], ObservedAt: w.observed[name]}
	switch {
	case !live:
		s.State = placement.StateLost
	case s.Draining:
		s.State = placement.StateDraining
	default:
		s.State = placement.StateReady
	}
	return s, true
}

// Lost returns a channel that is closed when the named node is lost (its lease
// expired or it deregistered); for a node that is not live now it is closed
// already. A call in flight to the node stops waiting on it.
func (w *Watcher) Lost(name string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, live := w.live[name]; !live {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	ch, ok := w.lost[name]
	if !ok {
		ch = make(chan struct{})
		w.lost[name] = ch
	}
	return ch
}

// Nodes returns every known node, sorted by name.
func (w *Watcher) Nodes() []NodeStatus {
	w.mu.RLock()
	defer w.mu.RUnlock()
	names := make(map[string]bool, len(w.known)+len(w.live))
	for n := range w.known {
		names[n] = true
	}
	for n := range w.live {
		names[n] = true
	}
	out := make([]NodeStatus, 0, len(names))
	for n := range names {
		if s, ok := w.statusLocked(n); ok {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Untrusted returns the keys of records ignored because they do not verify, with
// the reason.
func (w *Watcher) Untrusted() map[string]string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make(map[string]string, len(w.untrusted))
	for k, v := range w.untrusted {
		out[k] = v
	}
	return out
}

// Snapshot implements placement.Source.
func (w *Watcher) Snapshot(ctx context.Context) ([]placement.Node, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nodes := w.Nodes()
	out := make([]placement.Node, len(nodes))
	for i, n := range nodes {
		out[i] = n.placementNode()
	}
	return out, nil
}
