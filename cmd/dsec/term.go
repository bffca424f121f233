package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/dsec-dev/dsec/pkg/api"
)

// termInfo is the local terminal dsec runs on, if any: its stdout when that is
// a terminal (the window whose size counts), else its stdin.
type termInfo struct {
	fd    int // -1: no terminal
	stdin bool
}

func localTerminal() termInfo {
	in, out := int(os.Stdin.Fd()), int(os.Stdout.Fd())
	t := termInfo{fd: -1, stdin: term.IsTerminal(in)}
	switch {
	case term.IsTerminal(out):
		t.fd = out
	case t.stdin:
		t.fd = in
	}
	return t
}

func (t termInfo) ok() bool { return t.fd >= 0 }

// isStdin says dsec's stdin is a terminal (so raw mode applies to it).
func (t termInfo) isStdin() bool { return t.stdin }

func (t termInfo) size() (api.TermSize, error) {
	w, h, err := term.GetSize(t.fd)
	return api.TermSize{Cols: w, Rows: h}, err
}

// makeRaw puts stdin's terminal in raw mode and returns what restores it.
func (t termInfo) makeRaw() (func(), error) {
	fd := int(os.Stdin.Fd())
	st, err := term.MakeRaw(fd)
	if err != nil {
		return nil, err
	}
	return func() { _ = term.Restore(fd, st) }, nil
}

// onResize calls f with the terminal's new size on every SIGWINCH until the
// returned stop is called.
func (t termInfo) onResize(f func(api.TermSize)) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				if sz, err := t.size(); err == nil {
					f(sz)
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// notifyEnd cancels ctx on the signals that end an interactive session from
// outside (the terminal hung up, a quit or a termination request; main already
// turns SIGINT and SIGTERM into a cancellation), so the deferred terminal
// restore runs instead of the default action killing dsec in raw mode.
func notifyEnd(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGINT, syscall.SIGTERM)
}
