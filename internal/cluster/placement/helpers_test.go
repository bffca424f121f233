package placement

import (
	"context"
	"fmt"
	"testing"
)

// node returns a ready container node with room for max sandboxes.
func node(name string, max int64) Node {
	return Node{
		Name: name, State: StateReady, Backends: []string{"container"},
		Capacity: Resources{Sandboxes: max, MilliCPU: max * 1000, MemoryBytes: max << 30},
	}
}

func equalNodes(n int, max int64) []Node {
	out := make([]Node, n)
	for i := range out {
		out[i] = node(fmt.Sprintf("n%03d", i), max)
	}
	return out
}

func newEngine(t testing.TB, cfg Config, nodes ...Node) (*Engine, *MemSource) {
	t.Helper()
	src := NewMemSource(nodes...)
	if cfg.Seed == 0 {
		cfg.Seed = 42
	}
	e := New(src, cfg)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e, src
}

var req1 = Request{Backend: "container", MilliCPU: 1000, MemoryBytes: 1 << 30}
