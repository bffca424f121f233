package router

import (
	"context"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fnNode is a node serving FnCalls: it refuses beyond max at once.
type fnNode struct {
	session.Unimplemented
	name  string
	max   int
	mu    sync.Mutex
	calls int
}

func (f *fnNode) FnCall(_ context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.max == 0 {
		return api.FnCallResult{}, errdefs.Exhausted(1, "%s runs too many FnCalls", f.name)
	}
	f.calls++
	return api.FnCallResult{Verdict: api.VerdictAccepted, Tests: []api.FnCallTestResult{{Message: f.name}}}, nil
}

// ranOn is the node a fnNode's result came from.
func ranOn(res api.FnCallResult) string {
	if len(res.Tests) == 0 {
		return ""
	}
	return res.Tests[0].Message
}

func (f *fnNode) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

// fnRig: n1 and n3 serve FnCall (capacity 4 each, as reported), n2 does not.
type fnRig struct {
	view  *fakeView
	nodes map[string]*fnNode
	r     *Router
	eng   *placement.Engine
}

func newFnRig(t *testing.T, loads map[string]int64, max map[string]int) *fnRig {
	g := &fnRig{view: &fakeView{nodes: map[string]cluster.NodeStatus{}}, nodes: map[string]*fnNode{}}
	for _, name := range []string{"n1", "n2", "n3"} {
		backends := []string{"container", api.BackendFnCall}
		if name == "n2" {
			backends = []string{"container"}
		}
		m, ok := max[name]
		if !ok {
			m = 100
		}
		g.nodes[name] = &fnNode{name: name, max: m}
		g.view.nodes[name] = cluster.NodeStatus{State: placement.StateReady, NodeRecord: cluster.NodeRecord{
			Name: name, Addr: "fake://" + name, Backends: backends, FnCallCapacity: 4, FnCallLoad: loads[name]}}
	}
	g.eng = placement.New(FnCallSource{Nodes: g.view}, placement.Config{Seed: 1, K: 3, MaxReplacements: 3})
	if err := g.eng.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.r = New(Config{Nodes: g.view, FnCalls: g.eng,
		Dial: func(n cluster.NodeStatus) session.Service { return g.nodes[n.Name] }})
	return g
}

func TestFnCallGoesToFnCallNodes(t *testing.T) {
	g := newFnRig(t, nil, nil)
	ctx := context.Background()
	for range 40 {
		res, err := g.r.FnCall(ctx, api.FnCallRequest{})
		if err != nil || res.Verdict != api.VerdictAccepted {
			t.Fatalf("fncall: %+v %v", res, err)
		}
	}
	if g.nodes["n2"].count() != 0 || g.nodes["n1"].count() == 0 || g.nodes["n3"].count() == 0 {
		t.Fatalf("calls n1 %d, n2 %d (no fncall), n3 %d", g.nodes["n1"].count(), g.nodes["n2"].count(), g.nodes["n3"].count())
	}
	if g.eng.InFlight() != 0 {
		t.Fatalf("%d FnCalls still charged in flight after they returned", g.eng.InFlight())
	}
}

func TestFnCallLeastLoaded(t *testing.T) {
	g := newFnRig(t, map[string]int64{"n1": 3}, nil) // n1 reports 3 of 4 busy
	for range 10 {
		if res, err := g.r.FnCall(context.Background(), api.FnCallRequest{}); err != nil || ranOn(res) != "n3" {
			t.Fatalf("fncall went to %q (%v), want the idle n3", ranOn(res), err)
		}
	}
}

func TestFnCallReplacedOnRejection(t *testing.T) {
	// n3 looks idle but refuses: every call ends on n1.
	g := newFnRig(t, map[string]int64{"n1": 2}, map[string]int{"n3": 0})
	for range 5 {
		if res, err := g.r.FnCall(context.Background(), api.FnCallRequest{}); err != nil || ranOn(res) != "n1" {
			t.Fatalf("fncall: %q %v, want n1 after n3 refused", ranOn(res), err)
		}
	}
}

func TestFnCallExhausted(t *testing.T) {
	// Every FnCall node refuses: resource_exhausted with Retry-After.
	g := newFnRig(t, nil, map[string]int{"n1": 0, "n3": 0})
	_, err := g.r.FnCall(context.Background(), api.FnCallRequest{})
	if d, ok := errdefs.RetryAfter(err); !errdefs.Is(err, api.CodeResourceExhausted) || !ok || d <= 0 {
		t.Fatalf("all refusing: %v (retry after %v)", err, d)
	}
	// Every FnCall node reports itself full: refused without asking any.
	g = newFnRig(t, map[string]int64{"n1": 4, "n3": 4}, nil)
	_, err = g.r.FnCall(context.Background(), api.FnCallRequest{})
	if _, ok := errdefs.RetryAfter(err); !errdefs.Is(err, api.CodeResourceExhausted) || !ok {
		t.Fatalf("all full: %v", err)
	}
	if g.nodes["n1"].count()+g.nodes["n3"].count() != 0 {
		t.Fatal("a full node was asked")
	}
	// No node serves FnCall: unavailable.
	g = newFnRig(t, nil, nil)
	for _, n := range []string{"n1", "n3"} {
		st := g.view.nodes[n]
		st.Backends = []string{"container"}
		g.view.nodes[n] = st
	}
	if err := g.eng.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.r.FnCall(context.Background(), api.FnCallRequest{}); !errdefs.Is(err, api.CodeUnavailable) {
		t.Fatalf("no FnCall node: %v", err)
	}
}
