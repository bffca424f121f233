package initproto

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchCtx: the deadline is applied at once; a cancel before stop sets a
// past deadline, and stop returns only once it was set; after stop a cancel
// sets nothing.
func TestWatchCtx(t *testing.T) {
	var last atomic.Int64 // UnixNano of the last deadline set
	set := func(d time.Time) error { last.Store(d.UnixNano()); return nil }

	dl := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	stop := watchCtx(ctx, set)
	if last.Load() != dl.UnixNano() {
		t.Errorf("deadline not applied")
	}
	cancel()
	stop()
	if got := time.Unix(0, last.Load()); !got.Before(time.Unix(2, 0)) {
		t.Errorf("after cancel and stop: deadline %v, want one in the past", got)
	}

	ctx, cancel = context.WithCancel(context.Background())
	stop = watchCtx(ctx, set)
	if last.Load() != (time.Time{}).UnixNano() {
		t.Errorf("no deadline: set %v, want the zero time", time.Unix(0, last.Load()))
	}
	stop()
	cancel()
	if last.Load() != (time.Time{}).UnixNano() {
		t.Errorf("a cancel after stop set a deadline")
	}

	stop = watchCtx(context.Background(), set) // never cancelled: nothing to watch
	stop()
}
