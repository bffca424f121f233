package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/app/lifecycle"
)

// steps returns n steps recording their starts and closes in log.
func steps(n int, log *[]string, failStart int) []lifecycle.Step {
	var out []lifecycle.Step
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		out = append(out, lifecycle.Step{Name: name, Start: func(context.Context) (lifecycle.Close, error) {
			if i == failStart {
				return nil, errors.New("boom")
			}
			*log = append(*log, "start "+name)
			return func(context.Context) error { *log = append(*log, "close "+name); return nil }, nil
		}})
	}
	return out
}

func TestStartReleasesInReverseOnFailure(t *testing.T) {
	var log []string
	_, err := lifecycle.Start(context.Background(), steps(4, &log, 2), lifecycle.Options{})
	if err == nil || err.Error() != "s2: boom" {
		t.Fatalf("err %v", err)
	}
	want := []string{"start s0", "start s1", "close s1", "close s0"}
	if !slices.Equal(log, want) {
		t.Fatalf("log %q, want %q", log, want)
	}
}

func TestFailAfterEveryStep(t *testing.T) {
	for _, name := range lifecycle.Names(steps(3, new([]string), -1)) {
		var log []string
		_, err := lifecycle.Start(context.Background(), steps(3, &log, -1), lifecycle.Options{FailAfter: name})
		if !errors.Is(err, lifecycle.ErrInjected) {
			t.Fatalf("fail after %s: %v", name, err)
		}
		var open []string
		for _, l := range log {
			if n, ok := strings.CutPrefix(l, "start "); ok {
				open = append(open, n)
			} else if n, ok := strings.CutPrefix(l, "close "); ok {
				if open[len(open)-1] != n {
					t.Fatalf("fail after %s: %s closed out of order (%q)", name, n, log)
				}
				open = open[:len(open)-1]
			}
		}
		if len(open) != 0 {
			t.Errorf("fail after %s: left open %q", name, open)
		}
	}
}

func TestStackCloseOnceJoinsErrors(t *testing.T) {
	var s lifecycle.Stack
	n := 0
	s.Push("a", func(context.Context) error { n++; return errors.New("a failed") })
	s.Push("b", func(context.Context) error { n++; return nil })
	err := s.Close(context.Background())
	if err == nil || err.Error() != "closing a: a failed" || n != 2 {
		t.Fatalf("err %v after %d closes", err, n)
	}
	if err := s.Close(context.Background()); err != nil || n != 2 {
		t.Fatalf("second Close: %v, %d closes", err, n)
	}
	if err := (*lifecycle.Stack)(nil).Close(context.Background()); err != nil {
		t.Fatalf("Close of nil: %v", err)
	}
}

func TestGroupInterruptsAll(t *testing.T) {
	var g lifecycle.Group
	stop := make(chan struct{})
	interrupted := 0
	g.Add(func() error { <-stop; return nil }, func(error) { interrupted++; close(stop) })
	g.Add(func() error { return errors.New("first") }, func(error) { interrupted++ })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.Context(ctx)
	if err := g.Run(); err == nil || err.Error() != "first" {
		t.Fatalf("Run: %v", err)
	}
	if interrupted != 2 {
		t.Errorf("%d actors interrupted", interrupted)
	}
}

func TestRunClosesAfterTheFirstActor(t *testing.T) {
	var log []string
	var g lifecycle.Group
	g.Add(func() error { return errors.New("listener failed") }, func(error) {})
	err := lifecycle.Run(context.Background(), steps(2, &log, -1), lifecycle.Options{}, &g, time.Second)
	if err == nil || err.Error() != "listener failed" {
		t.Fatalf("Run: %v", err)
	}
	if want := []string{"start s0", "start s1", "close s1", "close s0"}; !slices.Equal(log, want) {
		t.Fatalf("log %q, want %q", log, want)
	}
	// A failed start runs no actor.
	log = nil
	ran := false
	var g2 lifecycle.Group
	g2.Add(func() error { ran = true; return nil }, func(error) {})
	if err := lifecycle.Run(context.Background(), steps(2, &log, 1), lifecycle.Options{}, &g2, time.Second); err == nil || ran {
		t.Fatalf("Run after a failed start: %v, actor ran %v", err, ran)
	}
	// The end of ctx stops the run.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lifecycle.Run(ctx, steps(1, &log, -1), lifecycle.Options{}, &lifecycle.Group{}, time.Second); err != nil {
		t.Fatalf("Run until ctx ends: %v", err)
	}
}
