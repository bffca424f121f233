package placement

import (
	"context"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestFilters(t *testing.T) {
	ctx := context.Background()
	good := node("good", 10)
	good.Backends = []string{"container", "microvm"}
	good.Hardware = []string{"kvm"}
	good.Labels = map[string]string{"zone": "a", "pool": "rl"}
	draining := good.Clone()
	draining.Name, draining.State = "draining", StateDraining
	lost := good.Clone()
	lost.Name, lost.State = "lost", StateLost
	nokvm := good.Clone()
	nokvm.Name, nokvm.Hardware = "nokvm", nil
	nomicro := good.Clone()
	nomicro.Name, nomicro.Backends = "nomicro", []string{"container"}
	zoneb := good.Clone()
	zoneb.Name, zoneb.Labels = "zoneb", map[string]string{"zone": "b", "pool": "rl"}
	full := good.Clone()
	full.Name, full.Load = "full", Resources{Sandboxes: 10}
	cpuFull := good.Clone()
	cpuFull.Name, cpuFull.Load = "cpufull", Resources{Sandboxes: 1, MilliCPU: 9500}
	e, _ := newEngine(t, Config{K: 1}, good, draining, lost, nokvm, nomicro, zoneb, full, cpuFull)

	cons, err := ParseConstraints("zone=a, pool=rl")
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Backend: "microvm", Hardware: []string{"kvm"}, Constraints: cons, MilliCPU: 1000, MemoryBytes: 1 << 30}
	for i := 0; i < 50; i++ {
		d, err := e.Place(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Node != "good" {
			t.Fatalf("placed on %s; only node good passes every filter", d.Node)
		}
		e.Release(d)
	}

	// Each filter alone keeps out exactly its node (K=1: random among the feasible).
	cases := []struct {
		name string
		req  Request
		want []string // nodes allowed
	}{
		{"hardware not asked", Request{Backend: "microvm", Constraints: cons, MilliCPU: 1}, []string{"good", "nokvm", "cpufull"}},
		{"backend container", Request{Backend: "container", Hardware: []string{"kvm"}, Constraints: cons, MilliCPU: 1}, []string{"good", "nomicro", "cpufull"}},
		{"zone any", Request{Backend: "microvm", Hardware: []string{"kvm"}, MilliCPU: 1}, []string{"good", "zoneb", "cpufull"}},
		{"cpu room 500m", Request{Backend: "microvm", Hardware: []string{"kvm"}, Constraints: cons, MilliCPU: 500}, []string{"good", "cpufull"}},
		{"cpu room 501m", Request{Backend: "microvm", Hardware: []string{"kvm"}, Constraints: cons, MilliCPU: 501}, []string{"good"}},
	}
	for _, c := range cases {
		seen := map[string]bool{}
		for i := 0; i < 200; i++ {
			d, err := e.Place(ctx, c.req)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			seen[d.Node] = true
			e.Release(d)
		}
		if len(seen) != len(c.want) {
			t.Fatalf("%s: placed on %v, want exactly %v", c.name, seen, c.want)
		}
		for _, w := range c.want {
			if !seen[w] {
				t.Fatalf("%s: placed on %v, want exactly %v", c.name, seen, c.want)
			}
		}
	}
}

func TestNoNodeMatchesIsClear(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, Config{}, equalNodes(3, 10)...)
	_, err := e.Place(ctx, Request{Backend: "container", Constraints: []Constraint{{"gpu", "h100"}}})
	if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "gpu=h100") {
		t.Fatalf("label nobody has: %v", err)
	}
	_, err = e.Place(ctx, Request{Backend: "fullvm"})
	if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "fullvm") {
		t.Fatalf("backend nobody has: %v", err)
	}
	_, err = e.Place(ctx, Request{Backend: "container", MilliCPU: 11_000})
	if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "larger than every node") {
		t.Fatalf("sandbox larger than any node: %v", err)
	}
	_, err = e.Place(ctx, Request{})
	if !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("no backend: %v", err)
	}
	_, err = e.Place(ctx, Request{Backend: "container", Constraints: []Constraint{{"a", "1"}, {"a", "2"}}})
	if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "no node can match both") {
		t.Fatalf("contradictory constraints: %v", err)
	}

	empty := New(NewMemSource(), Config{})
	if _, err := empty.Place(ctx, req1); !errdefs.Is(err, api.CodeUnavailable) {
		t.Fatalf("no snapshot yet: %v", err)
	}
	nodes := equalNodes(2, 10)
	nodes[0].State, nodes[1].State = StateDraining, StateLost
	e2, _ := newEngine(t, Config{}, nodes...)
	if _, err := e2.Place(ctx, req1); !errdefs.Is(err, api.CodeUnavailable) || !strings.Contains(err.Error(), "draining or lost") {
		t.Fatalf("all nodes draining/lost: %v", err)
	}
}

func TestPinning(t *testing.T) {
	ctx := context.Background()
	nodes := equalNodes(5, 2)
	nodes[3].State = StateDraining
	e, _ := newEngine(t, Config{}, nodes...)
	for i := 0; i < 2; i++ {
		d, err := e.Place(ctx, Request{Backend: "container", Node: "n002"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Node != "n002" {
			t.Fatalf("pinned to n002, placed on %s", d.Node)
		}
	}
	_, err := e.Place(ctx, Request{Backend: "container", Node: "n002"})
	if ra, ok := RetryAfter(err); !errdefs.Is(err, api.CodeResourceExhausted) || !ok || ra <= 0 || !strings.Contains(err.Error(), `"n002" is full`) {
		t.Fatalf("pinned node full: %v", err)
	}
	_, err = e.Place(ctx, Request{Backend: "container", Node: "nope"})
	if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), `node "nope" is not in the cluster`) {
		t.Fatalf("unknown node: %v", err)
	}
	_, err = e.Place(ctx, Request{Backend: "container", Node: "n003"})
	if !errdefs.Is(err, api.CodeUnavailable) || !strings.Contains(err.Error(), "draining") {
		t.Fatalf("draining node: %v", err)
	}
	_, err = e.Place(ctx, Request{Backend: "microvm", Node: "n001"})
	if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "no backend microvm") {
		t.Fatalf("pinned node without backend: %v", err)
	}
}

func TestScore(t *testing.T) {
	c := Resources{Sandboxes: 100, MilliCPU: 10_000, MemoryBytes: 100}
	if s := Score(c, Resources{Sandboxes: 10, MilliCPU: 5_000, MemoryBytes: 20}); s != 0.5 {
		t.Fatalf("score = %v, want the largest fraction 0.5", s)
	}
	if s := Score(Resources{}, Resources{Sandboxes: 10}); s != 0 {
		t.Fatalf("unlimited capacity scores %v", s)
	}
}

func TestImageLocalityBreaksTies(t *testing.T) {
	ctx := context.Background()
	nodes := equalNodes(2, 1000)
	nodes[1].Layers = []string{"sha256:base", "sha256:tools"}
	e, _ := newEngine(t, Config{K: 2}, nodes...)
	req := req1
	req.Layers = []string{"sha256:base", "sha256:tools"}
	// With both nodes equally loaded (k=2 samples both), the one with the layers wins
	// until its load is more than the tolerance (1 point = 10 sandboxes) above.
	counts := map[string]int{}
	for i := 0; i < 10; i++ {
		d, err := e.Place(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Node]++
	}
	if counts["n001"] != 10 {
		t.Fatalf("locality: %v, want all 10 on n001 (mounts the layers, within tolerance)", counts)
	}
	// Beyond the tolerance load wins again.
	for i := 0; i < 20; i++ {
		if _, err := e.Place(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := e.Place(ctx, req)
	e.Release(d)
	counts = map[string]int{}
	for i := 0; i < 100; i++ {
		d, _ := e.Place(ctx, req)
		counts[d.Node]++
	}
	if counts["n000"] < 40 {
		t.Fatalf("locality must only break ties, got %v", counts)
	}
}
