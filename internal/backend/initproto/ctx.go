package initproto

import (
	"context"
	"errors"
	"os"
	"time"
)

// watchCtx applies ctx's deadline through set and, if ctx is cancelled first,
// sets a past deadline so a blocked read returns. The returned stop waits for
// that to finish, so no stale deadline can hit a later call. No goroutine
// waits meanwhile (context.AfterFunc): a read per exec step does not start
// one and switch to it twice.
func watchCtx(ctx context.Context, set func(time.Time) error) (stop func()) {
	dl, _ := ctx.Deadline()
	_ = set(dl)
	if ctx.Done() == nil {
		return func() {}
	}
	fired := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(fired)
		_ = set(time.Unix(1, 0))
	})
	return func() {
		if !cancel() {
			<-fired // set is running or ran: let it finish
		}
	}
}

// ctxErr maps a deadline error caused by ctx back to ctx's error.
func ctxErr(ctx context.Context, err error) error {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if e := ctx.Err(); e != nil {
		return e
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return err
}
