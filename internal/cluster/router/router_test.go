package router

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/metrics/metricstest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeNode is a node's session service that only creates, gets, deletes and
// lists, admitting at most max sandboxes.
type fakeNode struct {
	session.Unimplemented // other calls: not_implemented
	name                  string
	max                   int
	fail                  bool // every create fails with internal

	mu        sync.Mutex
	sbs       map[string]api.Sandbox
	byReq     map[string]string
	images    []api.Image // nodeviews_test.go
	usageAsks [][]string
	execs     atomic.Int64 // Exec calls that reached the node
}

func (f *fakeNode) Create(_ context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Node != "" || req.Constraints != nil {
		return api.Sandbox{}, errdefs.Invalid("the router forwarded node/constraints")
	}
	if id, ok := f.byReq[req.RequestID]; ok && req.RequestID != "" {
		return f.sbs[id], nil
	}
	if f.fail {
		return api.Sandbox{}, errdefs.Internal(nil, "disk on fire")
	}
	if len(f.sbs) >= f.max {
		return api.Sandbox{}, errdefs.New(api.CodeResourceExhausted, "%s is full", f.name)
	}
	sb := api.Sandbox{ID: session.NewID(f.name), RequestID: req.RequestID, CreatedAt: time.Now()}
	f.sbs[sb.ID] = sb
	if req.RequestID != "" {
		f.byReq[req.RequestID] = sb.ID
	}
	return sb, nil
}

func (f *fakeNode) Get(_ context.Context, id string) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sbs[id]
	if !ok {
		return api.Sandbox{}, errdefs.NotFound("sandbox %s", id)
	}
	return sb, nil
}

func (f *fakeNode) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sbs[id]
	if !ok {
		return errdefs.NotFound("sandbox %s", id)
	}
	delete(f.sbs, id)
	delete(f.byReq, sb.RequestID)
	return nil
}

func (f *fakeNode) List(context.Context) ([]api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Sandbox
	for _, sb := range f.sbs {
		out = append(out, sb)
	}
	return out, nil
}

// Exec blocks until ctx ends (a node that went silent).
func (f *fakeNode) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	f.execs.Add(1)
	<-ctx.Done()
	return api.ExecResult{}, errdefs.Wrap(api.CodeUnavailable, ctx.Err(), "node went silent")
}

func (f *fakeNode) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sbs)
}

// fakeView is a NodeView whose nodes the test changes.
type fakeView struct {
	mu    sync.Mutex
	nodes map[string]cluster.NodeStatus
	lost  map[string]chan struct{}
}

func (v *fakeView) Lost(name string) <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lost == nil {
		v.lost = map[string]chan struct{}{}
	}
	if v.lost[name] == nil {
		v.lost[name] = make(chan struct{})
	}
	return v.lost[name]
}

func (v *fakeView) Node(name string) (cluster.NodeStatus, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n, ok := v.nodes[name]
	return n, ok
}

func (v *fakeView) Nodes() []cluster.NodeStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []cluster.NodeStatus
	for _, n := range v.nodes {
		out = append(out, n)
	}
	return out
}

func (v *fakeView) set(name string, st placement.State) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := v.nodes[name]
	n.State = st
	v.nodes[name] = n
	if ch := v.lost[name]; ch != nil && st == placement.StateLost {
		close(ch)
		delete(v.lost, name)
	}
}

// Snapshot makes the view the engine's source too.
func (v *fakeView) Snapshot(context.Context) ([]placement.Node, error) {
	var out []placement.Node
	for _, n := range v.Nodes() {
		out = append(out, placement.Node{Name: n.Name, State: n.State, Backends: n.Backends, Labels: n.Labels,
			Capacity: n.Capacity, Load: n.Load})
	}
	return out, nil
}

// memClaims is Claims in memory.
type memClaims struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *memClaims) Lookup(_ context.Context, id string) (string, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.m[id]
	return h, ok, nil
}

func (c *memClaims) Claim(_ context.Context, id, node string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.m[id]; ok {
		return h, nil
	}
	c.m[id] = node
	return node, nil
}

func (c *memClaims) Move(_ context.Context, id, from, to string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[id] == from {
		c.m[id] = to
	}
	return c.m[id], nil
}

func (c *memClaims) Drop(_ context.Context, id, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[id] == node {
		delete(c.m, id)
	}
}

type rig struct {
	view   *fakeView
	nodes  map[string]*fakeNode
	engine *placement.Engine
	r      *Router
	claims *memClaims
	m      *metrics.Metrics
}

// newRig makes nodes n1..nN; capacity is what the engine believes (0: none),
// max what each node admits.
func newRig(t *testing.T, n, capacity, max int) *rig {
	g := &rig{view: &fakeView{nodes: map[string]cluster.NodeStatus{}}, nodes: map[string]*fakeNode{}, claims: &memClaims{m: map[string]string{}}}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("n%d", i)
		g.nodes[name] = &fakeNode{name: name, max: max, sbs: map[string]api.Sandbox{}, byReq: map[string]string{}}
		g.view.nodes[name] = cluster.NodeStatus{State: placement.StateReady, NodeRecord: cluster.NodeRecord{
			Name: name, Addr: "fake://" + name, Backends: []string{"container"}, Labels: map[string]string{"zone": name},
			Capacity: placement.Resources{Sandboxes: int64(capacity)}}}
	}
	g.engine = placement.New(g.view, placement.Config{Seed: 1, MaxReplacements: n})
	if err := g.engine.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.m = metrics.New(metrics.Options{NoProcess: true, Backends: []string{"container"}, DefaultBackend: "container"})
	cl, err := g.m.NewCluster(func() []metrics.ClusterNode { return metricNodes(g.view.Nodes()) })
	if err != nil {
		t.Fatal(err)
	}
	g.r = New(Config{Nodes: g.view, Engine: g.engine, Claims: g.claims, Observer: cl,
		Dial: func(n cluster.NodeStatus) session.Service { return g.nodes[n.Name] }})
	return g
}

// metricNodes reports the fake view's nodes to the cluster metrics, as the API
// server reports its watcher's (the router itself imports no metrics).
func metricNodes(ns []cluster.NodeStatus) []metrics.ClusterNode {
	out := make([]metrics.ClusterNode, len(ns))
	for i, n := range ns {
		out[i] = metrics.ClusterNode{Name: n.Name, State: string(n.State),
			CapacitySandboxes: n.Capacity.Sandboxes, Sandboxes: n.Load.Sandboxes}
	}
	return out
}

// gather reads the rig's metrics.
func (g *rig) gather(t *testing.T) metricstest.Families {
	t.Helper()
	mfs, err := g.m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := metricstest.Families{}
	for _, f := range mfs {
		fams[f.GetName()] = f
	}
	return fams
}

func TestCreateSpreadsAndRoutes(t *testing.T) {
	g := newRig(t, 3, 100, 100)
	ctx := context.Background()
	ids := map[string]int{}
	for i := 0; i < 30; i++ {
		sb, err := g.r.Create(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := session.NodeOf(sb.ID)
		ids[n]++
		if got, err := g.r.Get(ctx, sb.ID); err != nil || got.ID != sb.ID {
			t.Fatalf("get %s: %v", sb.ID, err)
		}
	}
	for name, c := range ids {
		if c < 5 {
			t.Errorf("spread %v: %s got %d", ids, name, c)
		}
	}
	if l, _ := g.r.List(ctx); len(l) != 30 {
		t.Errorf("list: %d", len(l))
	}
}

func TestNodeStates(t *testing.T) {
	g := newRig(t, 2, 100, 100)
	ctx := context.Background()
	sb, err := g.r.Create(ctx, api.CreateSandboxRequest{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	g.view.set("n1", placement.StateLost)
	_, err = g.r.Get(ctx, sb.ID)
	if ae := errdefs.ToAPI(err); ae.Code != api.CodeNodeLost || ae.Status != 503 || !ae.Infrastructure || !ae.Retryable {
		t.Fatalf("sandbox of a lost node: %+v", ae)
	}
	if l, err := g.r.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("list leaves lost nodes out: %v %v", l, err)
	}
	g.view.set("n1", placement.StateReady)
	if _, err := g.r.Get(ctx, sb.ID); err != nil {
		t.Fatalf("back: %v", err)
	}
	for _, id := range []string{"sb-0123456789abcdef.n9", "sb-0123456789abcdef", "nonsense"} {
		if _, err := g.r.Get(ctx, id); !errdefs.Is(err, api.CodeNotFound) {
			t.Errorf("get %s: %v", id, err)
		}
	}
	for _, c := range []api.CreateSandboxRequest{{Node: "n9"}, {Constraints: map[string]string{"zone": "mars"}}} {
		if _, err := g.r.Create(ctx, c); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("create %+v: %v", c, err)
		}
	}
	sb, err = g.r.Create(ctx, api.CreateSandboxRequest{Constraints: map[string]string{"zone": "n2"}})
	if n, _ := session.NodeOf(sb.ID); err != nil || n != "n2" {
		t.Errorf("zone=n2: %s %v", sb.ID, err)
	}
}

// Nodes admit fewer than the engine believes: rejections re-place, and when all
// are full the answer is resource_exhausted with Retry-After.
func TestRejectionAndBackpressure(t *testing.T) {
	g := newRig(t, 3, 100, 2)
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		if _, err := g.r.Create(ctx, api.CreateSandboxRequest{}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	_, err := g.r.Create(ctx, api.CreateSandboxRequest{})
	if !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("full cluster: %v", err)
	}
	if _, ok := placement.RetryAfter(err); !ok {
		t.Errorf("no Retry-After in %v", err)
	}
	for _, n := range g.nodes {
		if n.count() != 2 {
			t.Errorf("%s holds %d", n.name, n.count())
		}
	}
	st := g.engine.Stats()
	if st.Rejections == 0 || st.Replacements == 0 {
		t.Errorf("no rejection or re-placement counted: %+v", st)
	}
	// The router's Observer counts what the engine saw: 7 placements, every
	// rejection by its code, every re-placement; the nodes by state.
	fams := g.gather(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dsec_sandbox_create_phase_duration_seconds_count", []string{"phase=placement", "backend=container"}, 7},
		{"dsec_admission_rejections_total", []string{"backend=container", "code=resource_exhausted"}, float64(st.Rejections)},
		{"dsec_replacements_total", []string{"backend=container"}, float64(st.Replacements)},
		{"dsec_cluster_nodes", []string{"state=ready"}, 3},
		{"dsec_cluster_nodes", []string{"state=lost"}, 0},
		{"dsec_cluster_node_capacity_sandboxes", []string{"node=n1"}, 100},
	} {
		if got := fams.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// A request ID claimed by another API server goes to its node, so a retry
// creates nothing twice.
func TestRequestIDFollowsClaim(t *testing.T) {
	g := newRig(t, 3, 100, 100)
	ctx := context.Background()
	first, err := g.r.Create(ctx, api.CreateSandboxRequest{RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		again, err := g.r.Create(ctx, api.CreateSandboxRequest{RequestID: "r1"})
		if err != nil || again.ID != first.ID {
			t.Fatalf("retry %d: %s %v, want %s", i, again.ID, err, first.ID)
		}
	}
	total := 0
	for _, n := range g.nodes {
		total += n.count()
	}
	if total != 1 {
		t.Fatalf("%d sandboxes for one request ID", total)
	}
}

func TestBatchAllOrNothing(t *testing.T) {
	g := newRig(t, 3, 4, 4)
	ctx := context.Background()
	reqs := make([]api.CreateSandboxRequest, 9)
	for i := range reqs {
		reqs[i].RequestID = fmt.Sprintf("b%d", i)
	}
	out, err := g.r.CreateBatch(ctx, reqs)
	if err != nil || len(out) != 9 {
		t.Fatalf("batch: %v", err)
	}
	again, err := g.r.CreateBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if again[i].ID != out[i].ID {
			t.Fatalf("retried batch: %s vs %s", again[i].ID, out[i].ID)
		}
	}
	count := func() (c int) {
		for _, n := range g.nodes {
			c += n.count()
		}
		return c
	}
	// Does not fit the engine's view (3 free): nothing is created.
	if _, err := g.r.CreateBatch(ctx, make([]api.CreateSandboxRequest, 4)); !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("batch over capacity: %v", err)
	}
	if c := count(); c != 9 {
		t.Fatalf("a refused batch left %d sandboxes", c-9)
	}
	// Fits, but one node fails for good: what was created is deleted again.
	g = newRig(t, 3, 10, 10)
	g.nodes["n2"].fail = true
	mixed := []api.CreateSandboxRequest{{Node: "n1"}, {Node: "n3"}, {Node: "n2"}, {Node: "n1"}, {Node: "n3"}}
	if _, err := g.r.CreateBatch(ctx, mixed); !errdefs.Is(err, api.CodeInternal) {
		t.Fatalf("batch with a failing node: %v", err)
	}
	if c := count(); c != 0 {
		t.Fatalf("a failed batch left %d sandboxes", c)
	}
}

// A call in flight to a node that is lost meanwhile answers node_lost at once.
func TestInFlightCallEndsWhenNodeIsLost(t *testing.T) {
	g := newRig(t, 1, 10, 10)
	ctx := context.Background()
	sb, err := g.r.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.r.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "inf"}})
		done <- err
	}()
	testwait.For(t, 5*time.Second, "the exec reached the node", func() bool { return g.nodes["n1"].execs.Load() == 1 })
	g.view.set("n1", placement.StateLost)
	select {
	case err := <-done:
		if !errdefs.Is(err, api.CodeNodeLost) {
			t.Fatalf("exec answered %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exec still waits on a lost node")
	}
}
