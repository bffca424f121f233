package main

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// signalGrace is how long dsec waits for a command it forwarded SIGINT or
// SIGTERM to before it gives up (ends the request; the server kills the command).
const signalGrace = 2 * time.Second

// repeatGap: a second signal sooner than this after the first is the same one.
const repeatGap = 250 * time.Millisecond

// forwardSignals is how `dsec exec` ends on Ctrl-C or SIGTERM: the first such
// signal goes to the running command (sigs); if the command has not ended
// signalGrace later, or at a second signal (Ctrl-C twice), the returned
// context is cancelled.
// stop ends the forwarding and reports the first signal (0 if none came).
func forwardSignals(parent context.Context) (ctx context.Context, sigs <-chan string, stop func() syscall.Signal) {
	// main cancels its context on these signals; here they are forwarded first.
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	out := make(chan string, 1)
	done := make(chan struct{})
	var first atomic.Int32
	go func() {
		var grace <-chan time.Time
		var at time.Time
		for {
			select {
			case s := <-ch:
				sig, _ := s.(syscall.Signal)
				if !first.CompareAndSwap(0, int32(sig)) {
					// A second signal gives up at once; one that comes with the
					// first (`timeout` signals its child and then its process
					// group) does not.
					if time.Since(at) > repeatGap {
						cancel()
					}
					continue
				}
				at = time.Now()
				select {
				case out <- unix.SignalName(sig):
				default:
				}
				grace = time.After(signalGrace)
			case <-grace:
				cancel()
			case <-done:
				return
			}
		}
	}()
	return ctx, out, func() syscall.Signal {
		signal.Stop(ch)
		close(done)
		cancel()
		return syscall.Signal(first.Load())
	}
}
