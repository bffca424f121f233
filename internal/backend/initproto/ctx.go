package initproto

import (
	"context"
	"errors"
	"os"
	"time"
)

// watchCtx applies ctx's deadline through set and, if ctx is cancelled first,
// sets a past deadline so a blocked read returns. The returned stop waits for
// the watcher to finish, so no stale deadline can hit a later call.
func watchCtx(ctx context.Context, set func(time.Time) error) (stop func()) {
	dl, _ := ctx.Deadline()
	_ = set(dl)
	if ctx.Done() == nil {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-ctx.Done():
			_ = set(time.Unix(1, 0))
		case <-done:
		}
	}()
	return func() { close(done); <-exited }
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
