// Package lifecycle starts a process's subsystems as a declared, named list of
// steps, each returning the Close that releases what it started, and runs the
// process's long-running parts under one run group. A start-up that fails at
// any step releases everything started before it, in reverse order, so a
// failed start leaves nothing behind (no swap device, kdamond, listener,
// mount or process).
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Close releases what a step started.
type Close func(ctx context.Context) error

// Step is one named part of a start-up.
type Step struct {
	Name string
	// Start starts the part; its Close (nil: nothing to release) runs when the
	// process stops or a later step fails.
	Start func(ctx context.Context) (Close, error)
}

// ErrInjected is the failure Options.FailAfter injects.
var ErrInjected = errors.New("injected start-up failure")

// Options tune Start.
type Options struct {
	// FailAfter, for tests, fails the start-up with ErrInjected right after
	// the step of this name started (its Close registered): every step then
	// has a test that its start-up releases what it made.
	FailAfter string
	Logger    *slog.Logger
}

// Stack is the Closes of the steps started, released in reverse order.
type Stack struct {
	mu      sync.Mutex
	closers []named
	log     *slog.Logger
}

type named struct {
	name  string
	close Close
}

// Push adds a Close to run before every Close already pushed.
func (s *Stack) Push(name string, c Close) {
	if c == nil {
		return
	}
	s.mu.Lock()
	s.closers = append(s.closers, named{name, c})
	s.mu.Unlock()
}

// Close runs the Closes in reverse order, each once, and joins their errors
// (each wrapped with its step's name). A second Close, or a Close of a nil
// Stack (nothing started), does nothing.
func (s *Stack) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	cs := s.closers
	s.closers = nil
	s.mu.Unlock()
	var errs []error
	for i := len(cs) - 1; i >= 0; i-- {
		if err := cs[i].close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", cs[i].name, err))
		}
	}
	return errors.Join(errs...)
}

// Start runs steps in order, pushing each Close on a new Stack. When a step
// fails (or Options.FailAfter names it), the steps started before are closed
// in reverse order and the error names the step.
func Start(ctx context.Context, steps []Step, opts Options) (*Stack, error) {
	s := &Stack{log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	for _, st := range steps {
		c, err := st.Start(ctx)
		s.Push(st.Name, c)
		if err == nil && opts.FailAfter == st.Name {
			err = ErrInjected
		}
		if err != nil {
			if cerr := s.Close(context.WithoutCancel(ctx)); cerr != nil {
				s.log.Warn("releasing a partial start-up", "failed_step", st.Name, "err", cerr)
			}
			return nil, fmt.Errorf("%s: %w", st.Name, err)
		}
	}
	return s, nil
}

// Run is a process's life: it starts steps, runs g until its first actor
// returns or ctx ends, and closes the steps started within timeout. It
// returns the start-up's error, else the first actor's, else the Close's.
func Run(ctx context.Context, steps []Step, opts Options, g *Group, timeout time.Duration) error {
	stack, err := Start(ctx, steps, opts)
	if err != nil {
		return err
	}
	g.Context(ctx)
	err = g.Run()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if cerr := stack.Close(sctx); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// Go runs f in a goroutine until the returned Close, which cancels f's
// context and waits for f to return.
func Go(f func(ctx context.Context)) Close {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	return func(context.Context) error { cancel(); <-done; return nil }
}

// Names returns the names of steps, in order.
func Names(steps []Step) []string {
	out := make([]string, len(steps))
	for i, st := range steps {
		out[i] = st.Name
	}
	return out
}

// Group runs actors together (github.com/oklog/run's model): Run starts
// every actor's execute, waits for the first to return, interrupts them all
// and waits for every execute to return.
type Group struct{ actors []actor }

type actor struct {
	execute   func() error
	interrupt func(error)
}

// Add adds an actor. interrupt must make execute return.
func (g *Group) Add(execute func() error, interrupt func(error)) {
	g.actors = append(g.actors, actor{execute, interrupt})
}

// Context adds an actor that returns when ctx ends (a signal), or when
// interrupted.
func (g *Group) Context(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	g.Add(func() error { <-ctx.Done(); return nil }, func(error) { cancel() })
}

// Run runs the actors until the first returns and returns its error (nil
// without actors).
func (g *Group) Run() error {
	if len(g.actors) == 0 {
		return nil
	}
	errc := make(chan error, len(g.actors))
	for _, a := range g.actors {
		go func() { errc <- a.execute() }()
	}
	err := <-errc
	for _, a := range g.actors {
		a.interrupt(err)
	}
	for range len(g.actors) - 1 {
		<-errc
	}
	return err
}
