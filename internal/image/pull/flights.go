package pull

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// flights runs one fetch per key for every caller asking for it at the same
// time, and stops it when no caller waits for it any more: a fetch runs
// under its own context, not any caller's (a caller that goes away leaves it
// to the others), cancelled when its last waiter's context ends. A caller
// arriving after that starts a new fetch.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one fetch in progress.
type flight struct {
	done    chan struct{} // closed when fn returned; val and err are set
	val     any
	err     error
	waiters int
	cancel  context.CancelFunc
}

// do returns the result of fn for key, run once for the callers waiting at
// the same time; fn's context ends when every such caller's has.
func (g *flights) do(ctx context.Context, key string, fn func(ctx context.Context) (any, error)) (any, error) {
	if ctx.Err() != nil {
		return nil, waitErr(ctx, key) // gone already: start nothing
	}
	g.mu.Lock()
	if g.m == nil {
		g.m = map[string]*flight{}
	}
	f, ok := g.m[key]
	if !ok {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		g.m[key] = f
		go func() {
			defer cancel()
			v, err := fn(fctx)
			g.mu.Lock()
			if g.m[key] == f {
				delete(g.m, key)
			}
			g.mu.Unlock()
			f.val, f.err = v, err
			close(f.done)
		}()
	}
	f.waiters++
	g.mu.Unlock()
	select {
	case <-f.done:
		g.leave(key, f)
		return f.val, f.err
	case <-ctx.Done():
		g.leave(key, f)
		return nil, waitErr(ctx, key)
	}
}

// waitErr is the error of a caller whose ctx ended waiting for key.
func waitErr(ctx context.Context, key string) error {
	what := strings.ReplaceAll(key, "\x00", " ")
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "waiting for %s", what)
	}
	return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
}

// leave counts a waiter of f out; the last one to leave before f ends
// cancels it, and later callers start another.
func (g *flights) leave(key string, f *flight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.waiters--
	if f.waiters > 0 {
		return
	}
	select {
	case <-f.done:
		return
	default:
	}
	f.cancel()
	if g.m[key] == f {
		delete(g.m, key)
	}
}
