package sandboxfusion

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Defaults of the wait queue (Options.QueueWait, Options.MaxQueued).
const (
	DefaultQueueWait = 60 * time.Second
	DefaultMaxQueued = 8192
)

// Backoff between a waiting call's attempts.
const (
	firstBackoff = 5 * time.Millisecond
	maxBackoff   = 500 * time.Millisecond
)

// queue stands between SandboxFusion's callers and FnCall. A call refused for
// want of room (resource_exhausted: every slot of the node, or of every node
// behind an API server, is taken; unavailable: no node serves FnCall right now)
// waits and tries again, up to the wait budget, instead of being answered 429
// or 503: verl scores any non-2xx answer but 504 as -1 at once, so a refusal in
// a burst would silently become negative reward. At most max calls wait at
// once; a call that cannot wait (the queue is full) or whose budget runs out
// is answered 504, which verl retries.
type queue struct {
	fc      session.FnCalls
	budget  time.Duration
	waiting chan struct{} // one token per waiting call
}

func newQueue(fc session.FnCalls, budget time.Duration, max int) *queue {
	return &queue{fc: fc, budget: budget, waiting: make(chan struct{}, max)}
}

// busy reports whether err means "no room now, try again".
func busy(err error) bool {
	return errdefs.Is(err, api.CodeResourceExhausted) || errdefs.Is(err, api.CodeUnavailable)
}

// FnCall implements session.FnCalls.
func (q *queue) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	res, err := q.fc.FnCall(ctx, req)
	if err == nil || !busy(err) {
		return res, err
	}
	select {
	case q.waiting <- struct{}{}:
		defer func() { <-q.waiting }()
	default:
		return res, errdefs.Wrap(api.CodeDeadlineExceeded, err, "%d calls already wait for a FnCall slot; try again", cap(q.waiting))
	}
	timer := time.NewTimer(q.budget)
	defer timer.Stop()
	backoff := firstBackoff
	for {
		// Full jitter: the calls of a burst do not retry in lockstep.
		wait := time.Duration(rand.Int64N(int64(backoff))) + time.Millisecond
		if d, ok := errdefs.RetryAfter(err); ok && d < wait {
			wait = max(d, time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-timer.C:
			return res, errdefs.Wrap(api.CodeDeadlineExceeded, err, "no FnCall slot became free within %v; try again", q.budget)
		case <-time.After(wait):
		}
		backoff = min(2*backoff, maxBackoff)
		res, err = q.fc.FnCall(ctx, req)
		if err == nil || !busy(err) {
			return res, err
		}
	}
}
