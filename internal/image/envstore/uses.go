package envstore

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Uses keeps one node's in-use marks in an EtcdState (see MarkUse): a create
// marks its environment before resolving it (Begin), and a mark is dropped
// once the node has no sandbox on the environment and no create of it in
// flight (Sync, after every delete and periodically). So `dsec image rm` on
// any machine of the cluster is refused while some node uses the environment.
type Uses struct {
	State *EtcdState
	Node  string
	// InUse reports whether a sandbox of this node uses environment name
	// (agent.Manager.ImageInUse).
	InUse  func(name string) bool
	Logger *slog.Logger

	io      sync.Mutex // serialises etcd mark changes
	mu      sync.Mutex
	pending map[string]int  // creates in flight per environment
	marked  map[string]bool // marks this node holds
}

// Load reads the marks this node holds from an earlier run.
func (u *Uses) Load(ctx context.Context) error {
	envs, err := u.State.MarkedBy(ctx, u.Node)
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.init()
	for _, e := range envs {
		u.marked[e] = true
	}
	return nil
}

func (u *Uses) init() {
	if u.pending == nil {
		u.pending, u.marked = map[string]int{}, map[string]bool{}
	}
}

// Begin marks env in use for a create (nothing for "" or a name that is no
// environment) and returns the func that ends the create. An environment the
// node already marks costs no etcd call.
func (u *Uses) Begin(ctx context.Context, env string) (func(), error) {
	if env == "" {
		return func() {}, nil
	}
	u.mu.Lock()
	u.init()
	u.pending[env]++
	marked := u.marked[env]
	u.mu.Unlock()
	done := func() {
		u.mu.Lock()
		u.pending[env]--
		if u.pending[env] <= 0 {
			delete(u.pending, env)
		}
		u.mu.Unlock()
	}
	if marked {
		return done, nil
	}
	u.io.Lock()
	defer u.io.Unlock()
	ok, err := u.State.MarkUse(ctx, env, u.Node)
	if err != nil {
		done()
		return nil, err
	}
	if ok {
		u.mu.Lock()
		u.marked[env] = true
		u.mu.Unlock()
	}
	return done, nil
}

// Sync drops the marks of environments this node no longer uses (no sandbox,
// no create in flight) and adds marks for environments its sandboxes use
// unmarked (after a restart).
func (u *Uses) Sync(ctx context.Context, used []string) {
	u.io.Lock()
	defer u.io.Unlock()
	u.mu.Lock()
	u.init()
	var drop []string
	for env := range u.marked {
		// Under mu: a create that begins later sees the mark gone and marks
		// again, after this Sync (io).
		if u.pending[env] == 0 && !u.InUse(env) {
			drop = append(drop, env)
			delete(u.marked, env)
		}
	}
	var add []string
	for _, env := range used {
		if env != "" && !u.marked[env] {
			add = append(add, env)
		}
	}
	u.mu.Unlock()
	for _, env := range drop {
		if err := u.State.UnmarkUse(ctx, env, u.Node); err != nil {
			u.mu.Lock()
			u.marked[env] = true // try again next time
			u.mu.Unlock()
			u.log().Warn("environment store: unmarking an environment", "env", env, "err", err)
		}
	}
	for _, env := range add {
		ok, err := u.State.MarkUse(ctx, env, u.Node)
		if err != nil {
			u.log().Warn("environment store: marking an environment", "env", env, "err", err)
			continue
		}
		if ok {
			u.mu.Lock()
			u.marked[env] = true
			u.mu.Unlock()
		}
	}
}

// Run calls Sync(used()) now and then every interval while the node holds
// marks, until ctx ends (marks of sandboxes that ended on their own: TTL,
// idle timeout).
func (u *Uses) Run(ctx context.Context, interval time.Duration, used func() []string) {
	u.Sync(ctx, used())
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			u.mu.Lock()
			n := len(u.marked)
			u.mu.Unlock()
			if n > 0 { // nothing to drop otherwise (creates mark as they go)
				u.Sync(ctx, used())
			}
		}
	}
}

func (u *Uses) log() *slog.Logger {
	if u.Logger == nil {
		return slog.Default()
	}
	return u.Logger
}
