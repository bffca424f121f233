package progress

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Pull shows an image pull's progress (api.PullProgress) on w: a byte bar
// on a terminal, else a plain line each time the pull's phase or its count
// of layers done changes. A nil *Pull shows nothing.
type Pull struct {
	w    io.Writer
	ref  string
	tty  bool
	bar  *Bar
	last string
}

// NewPull returns a Pull of ref drawn on w.
func NewPull(w io.Writer, ref string) *Pull {
	return &Pull{w: w, ref: ref, tty: IsTerminal(w)}
}

// Update shows pr.
func (p *Pull) Update(pr api.PullProgress) {
	if p == nil {
		return
	}
	done := 0
	for _, l := range pr.Layers {
		if l.Phase == api.PullDone {
			done++
		}
	}
	state := fmt.Sprintf("pulling %s: %s, %d/%d layers", p.ref, pr.Phase, done, len(pr.Layers))
	if p.tty {
		if p.bar == nil {
			p.bar = NewBytes(p.w, state, pr.TotalBytes)
		}
		p.bar.SetLabel(state)
		p.bar.SetTotal(pr.TotalBytes)
		p.bar.Set(pr.FetchedBytes)
		return
	}
	if state == p.last {
		return
	}
	p.last = state
	fmt.Fprintf(p.w, "%s, %s of %s fetched\n", state, Bytes(pr.FetchedBytes), Bytes(pr.TotalBytes))
}

// Finish ends the bar's line (if one was drawn).
func (p *Pull) Finish() {
	if p != nil {
		p.bar.Finish()
	}
}

// WatchPull shows on w the progress of the pull of ref that watch reports
// (client.Client.WatchPull) until the returned stop is called, which ends
// the line.
func WatchPull(ctx context.Context, w io.Writer, ref string, watch func(context.Context, string, time.Duration, func(api.PullProgress))) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	p := NewPull(w, ref)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watch(ctx, ref, 0, p.Update)
	}()
	return func() {
		cancel()
		<-done
		p.Finish()
	}
}
