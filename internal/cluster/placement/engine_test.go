package placement

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// spread places m sandboxes over n equal nodes with the given k and returns
// max/mean of the per-node counts.
func spread(t *testing.T, k, n, m int) float64 {
	e, _ := newEngine(t, Config{K: k, Seed: 7}, equalNodes(n, 1000)...)
	counts := map[string]int{}
	for i := 0; i < m; i++ {
		d, err := e.Place(context.Background(), req1)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Node]++
	}
	top := 0
	for _, c := range counts {
		top = max(top, c)
	}
	return float64(top) / (float64(m) / float64(n))
}

// TestPowerOfKSpread: 10,000 placements over 100 equal nodes. With two choices the
// gap between the fullest node and the mean is ln ln n / ln 2 + O(1) whatever the
// number of balls (Berenbrink et al. 2006): about 2.2 + a small constant over a mean
// of 100, so max/mean ≤ 1.08 leaves room for the constant. Random choice (k = 1) has
// a gap of about sqrt(2 (m/n) ln n) ≈ 30, max/mean ≈ 1.3.
func TestPowerOfKSpread(t *testing.T) {
	p2 := spread(t, 2, 100, 10_000)
	p1 := spread(t, 1, 100, 10_000)
	t.Logf("max/mean: k=2 %.3f, k=1 (random) %.3f", p2, p1)
	if p2 > 1.08 {
		t.Fatalf("k=2 max/mean %.3f > 1.08", p2)
	}
	if p1 < 1.15 || p2 >= p1 {
		t.Fatalf("k=2 (%.3f) must be strictly better than random (%.3f)", p2, p1)
	}
}

func TestInFlightOverlay(t *testing.T) {
	ctx := context.Background()
	nodes := equalNodes(2, 10)
	nodes[0].Load.Sandboxes = 9 // room for one
	nodes[1].Load.Sandboxes = 10
	e, src := newEngine(t, Config{}, nodes...)
	d1, err := e.Place(ctx, req1)
	if err != nil || d1.Node != "n000" {
		t.Fatalf("first: %v %v", d1, err)
	}
	_, err = e.Place(ctx, req1)
	if !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("second placement before a new snapshot must not land on the node with room for one: %v", err)
	}
	// The agent admits it; a snapshot taken before the confirmation still does not
	// count it, so the charge stays.
	src.Update("n000", func(n *Node) { n.Load.Sandboxes++ })
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if e.InFlight() != 1 {
		t.Fatalf("unconfirmed placement dropped by a refresh")
	}
	e.Confirm(d1)
	if _, err := e.Place(ctx, req1); !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("confirmed, not yet in a snapshot: %v", err)
	}
	time.Sleep(time.Millisecond) // the next snapshot is taken strictly after the confirmation (clock order under test)
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if e.InFlight() != 0 {
		t.Fatalf("a snapshot observed after the confirmation includes it; in flight = %d", e.InFlight())
	}
	if _, err := e.Place(ctx, req1); !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("node counted in the snapshot must stay full: %v", err)
	}
	// Release gives the room back at once.
	src.Update("n001", func(n *Node) { n.Load.Sandboxes = 9 })
	e.Refresh(ctx)
	d, err := e.Place(ctx, req1)
	if err != nil || d.Node != "n001" {
		t.Fatalf("%v %v", d, err)
	}
	e.Release(d)
	if d, err := e.Place(ctx, req1); err != nil || d.Node != "n001" {
		t.Fatalf("after release: %v %v", d, err)
	}
}

func TestInFlightTTL(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, Config{InFlightTTL: time.Millisecond}, equalNodes(1, 1)...)
	if _, err := e.Place(ctx, req1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the in-flight TTL (1 ms) passes: the expiry under test
	e.Refresh(ctx)
	if e.InFlight() != 0 || e.Stats().Expired != 1 {
		t.Fatalf("abandoned placement not expired: %d, %+v", e.InFlight(), e.Stats())
	}
	if _, err := e.Place(ctx, req1); err != nil {
		t.Fatal(err)
	}
}

var errFull = errdefs.New(api.CodeResourceExhausted, "agent: node full")

func TestReplacementOnRejection(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, Config{MaxReplacements: 5}, equalNodes(10, 100)...)
	// Nodes n000..n004 always reject; with 6 attempts every sandbox finds a node.
	rejecting := func(name string) bool { return name < "n005" }
	var tried []string
	for i := 0; i < 200; i++ {
		tried = tried[:0]
		d, err := e.PlaceAndAdmit(ctx, req1, func(_ context.Context, d *Decision) error {
			tried = append(tried, d.Node)
			if rejecting(d.Node) {
				return errFull
			}
			return nil
		})
		if err != nil {
			t.Fatalf("half the nodes accept, yet: %v (tried %v)", err, tried)
		}
		if rejecting(d.Node) || len(d.Rejected) != len(tried)-1 {
			t.Fatalf("decision %+v after trying %v", d, tried)
		}
		seen := map[string]bool{}
		for _, n := range tried {
			if seen[n] {
				t.Fatalf("re-placed on a node that already rejected: %v", tried)
			}
			seen[n] = true
		}
	}
	if e.InFlight() != 200 {
		t.Fatalf("in flight %d, want the 200 confirmed; rejected charges must be gone", e.InFlight())
	}
	st := e.Stats()
	if st.Rejections == 0 || st.Replacements != st.Rejections {
		t.Fatalf("stats %+v", st)
	}
	// A rejecting node is avoided until the next snapshot: each of the five
	// rejects once, not once per sandbox (it looks empty, so least-loaded ranking
	// would otherwise keep choosing it).
	if st.Rejections > 5 {
		t.Fatalf("%d rejections for 200 sandboxes: rejecting nodes are not avoided", st.Rejections)
	}

	// Everyone rejects: bounded, then resource_exhausted with Retry-After.
	calls := 0
	_, err := e.PlaceAndAdmit(ctx, req1, func(context.Context, *Decision) error { calls++; return errFull })
	if ra, ok := RetryAfter(err); !ok || ra <= 0 || !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("all reject: %v", err)
	}
	if d, ok := errdefs.RetryAfter(err); !ok || d <= 0 {
		t.Errorf("the HTTP layer's errdefs.RetryAfter does not see the engine's Retry-After: %v", err)
	}
	if calls != 6 {
		t.Fatalf("admission tried %d times, want 1 + MaxReplacements = 6", calls)
	}
	// A non-rejection error ends it at once and releases the charge.
	before := e.InFlight()
	boom := errors.New("rpc: connection reset")
	_, err = e.PlaceAndAdmit(ctx, req1, func(context.Context, *Decision) error { return boom })
	if !errors.Is(err, boom) || e.InFlight() != before {
		t.Fatalf("other error: %v, in flight %d → %d", err, before, e.InFlight())
	}
	// A pinned sandbox is not re-placed elsewhere.
	_, err = e.PlaceAndAdmit(ctx, Request{Backend: "container", Node: "n007"}, func(context.Context, *Decision) error { return errFull })
	if !errdefs.Is(err, api.CodeResourceExhausted) || !strings.Contains(err.Error(), "n007") {
		t.Fatalf("pinned rejection: %v", err)
	}
	// A pinned sandbox whose node does not answer: unavailable, not a lack of room.
	before = e.InFlight()
	down := errdefs.New(api.CodeUnavailable, "node rpc Create: node unreachable")
	_, err = e.PlaceAndAdmit(ctx, Request{Backend: "container", Node: "n007"}, func(context.Context, *Decision) error { return down })
	if !errdefs.Is(err, api.CodeUnavailable) || errdefs.Is(err, api.CodeResourceExhausted) || !strings.Contains(err.Error(), "n007") || e.InFlight() != before {
		t.Fatalf("pinned to an unreachable node: %v (in flight %d → %d)", err, before, e.InFlight())
	}
}

func TestBackpressureWhenFull(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, Config{RefreshInterval: 3 * time.Second}, equalNodes(4, 5)...)
	for i := 0; i < 20; i++ {
		if _, err := e.Place(ctx, req1); err != nil {
			t.Fatalf("placement %d of 20 fitting: %v", i, err)
		}
	}
	done := make(chan error, 1)
	go func() { _, err := e.Place(ctx, req1); done <- err }()
	select {
	case err := <-done:
		ra, ok := RetryAfter(err)
		if !errdefs.Is(err, api.CodeResourceExhausted) || !ok || ra != 3*time.Second {
			t.Fatalf("full cluster: %v (retry after %v %v)", err, ra, ok)
		}
		if h := RetryAfterHeader(err); h != "3" {
			t.Fatalf("Retry-After header %q, want 3", h)
		}
		if h := RetryAfterHeader(fmt.Errorf("create: %w", exhausted(1500*time.Millisecond, "x"))); h != "2" {
			t.Fatalf("1.5 s rounds up to 2, got %q", h)
		}
		if h := RetryAfterHeader(errors.New("other")); h != "" {
			t.Fatalf("no Retry-After on other errors, got %q", h)
		}
		ae := errdefs.ToAPI(err)
		if ae.Status != 429 || !ae.Retryable {
			t.Fatalf("wire error %+v", ae)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("placement on a full cluster hangs")
	}
}

func TestBatchAllOrNothing(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, Config{}, equalNodes(10, 100)...)
	ds, err := e.PlaceBatch(ctx, req1, 600)
	if err != nil || len(ds) != 600 {
		t.Fatalf("batch of 600 into 1000: %d, %v", len(ds), err)
	}
	ids := map[uint64]bool{}
	for _, d := range ds {
		ids[d.ID] = true
	}
	if len(ids) != 600 || e.InFlight() != 600 {
		t.Fatalf("distinct ids %d, in flight %d", len(ids), e.InFlight())
	}
	_, err = e.PlaceBatch(ctx, req1, 401)
	if ra, ok := RetryAfter(err); !errdefs.Is(err, api.CodeResourceExhausted) || !ok || ra <= 0 || !strings.Contains(err.Error(), "only 400 fit") {
		t.Fatalf("batch of 401 into 400: %v", err)
	}
	if e.InFlight() != 600 {
		t.Fatalf("failed batch left charges behind: in flight %d, want 600", e.InFlight())
	}
	if ds, err := e.PlaceBatch(ctx, req1, 400); err != nil || len(ds) != 400 {
		t.Fatalf("the 400 that fit after the rollback: %d %v", len(ds), err)
	}
	if _, err := e.PlaceBatch(ctx, req1, 0); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("batch of 0: %v", err)
	}
}

// TestConcurrent: many goroutines placing at once never over-commit a node (run
// with -race).
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	e0, src := newEngine(t, Config{}, equalNodes(20, 50)...)
	// A second engine over the same cluster: the two do not coordinate, the
	// agents' admission (below) keeps every node within capacity.
	e1 := New(src, Config{Seed: 9})
	if err := e1.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed, exhaustedN := 0, 0
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			e := []*Engine{e0, e1}[g%2]
			for i := 0; i < 100; i++ {
				if g < 2 && i%10 == 0 {
					e.Refresh(ctx)
				}
				var err error
				if i%7 == 0 {
					_, err = e.PlaceBatch(ctx, req1, 3)
				} else {
					_, err = e.PlaceAndAdmit(ctx, req1, func(_ context.Context, d *Decision) error {
						ok := false
						src.Update(d.Node, func(n *Node) {
							if n.Load.Sandboxes < n.Capacity.Sandboxes {
								n.Load.Sandboxes++
								ok = true
							}
						})
						if !ok {
							return errFull
						}
						return nil
					})
				}
				mu.Lock()
				if err == nil {
					placed++
				} else if errdefs.Is(err, api.CodeResourceExhausted) {
					exhaustedN++
				} else {
					t.Error(err)
				}
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	snap, _ := src.Snapshot(ctx)
	for _, n := range snap {
		if n.Load.Sandboxes > n.Capacity.Sandboxes {
			t.Fatalf("node %s over-committed: %d > %d", n.Name, n.Load.Sandboxes, n.Capacity.Sandboxes)
		}
	}
	if placed == 0 || exhaustedN == 0 {
		t.Fatalf("placed %d, exhausted %d: want both (1600 attempts, 1000 slots)", placed, exhaustedN)
	}
	t.Logf("placed %d, exhausted %d, stats %+v %+v", placed, exhaustedN, e0.Stats(), e1.Stats())
}

func TestRefreshRefusesDuplicateNodes(t *testing.T) {
	e, src := newEngine(t, Config{}, equalNodes(2, 1)...)
	src.Set(append(equalNodes(2, 1), node("n000", 5)))
	if err := e.Refresh(context.Background()); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("duplicate node: %v", err)
	}
	if _, err := e.Place(context.Background(), req1); err != nil {
		t.Fatalf("previous snapshot must stay: %v", err)
	}
}

// TestRejectedNodeNotRetried: even when the nodes that rejected are the only ones
// left (so the avoid-until-next-snapshot rule gives way), a sandbox never goes back
// to a node that rejected it.
func TestRejectedNodeNotRetried(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, Config{MaxReplacements: 5}, equalNodes(2, 10)...)
	var tried []string
	_, err := e.PlaceAndAdmit(ctx, req1, func(_ context.Context, d *Decision) error {
		tried = append(tried, d.Node)
		return errFull
	})
	if len(tried) != 2 || tried[0] == tried[1] || !errdefs.Is(err, api.CodeResourceExhausted) || !strings.Contains(err.Error(), "rejected it") {
		t.Fatalf("tried %v, err %v: want each of the 2 nodes once, then resource_exhausted", tried, err)
	}
	// Another sandbox may still use them once nothing else is left.
	if _, err := e.Place(ctx, req1); err != nil {
		t.Fatalf("rejecting nodes are avoided, not removed: %v", err)
	}
}

// TestWatch: the watcher's periodic snapshot brings new nodes and states in.
func TestWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := equalNodes(1, 10)
	nodes[0].State = StateDraining
	src := NewMemSource(nodes...)
	e := New(src, Config{RefreshInterval: 5 * time.Millisecond})
	done := make(chan struct{})
	go func() { e.Watch(ctx); close(done) }()
	src.Update("n000", func(n *Node) { n.State = StateReady })
	var err error
	placed := testwait.Until(5*time.Second, func() bool {
		var d *Decision
		if d, err = e.Place(ctx, req1); err != nil {
			return false
		}
		if d.Node != "n000" {
			t.Fatalf("placed on %s", d.Node)
		}
		return true
	})
	if !placed {
		t.Fatalf("the watcher never brought the ready node in: %v", err)
	}
	cancel()
	<-done
}

// blockingSource lets the first Snapshot call return only after release closes.
type blockingSource struct {
	*MemSource
	first   chan struct{}
	release chan struct{}
	calls   int
	mu      sync.Mutex
}

func (b *blockingSource) Snapshot(ctx context.Context) ([]Node, error) {
	snap, err := b.MemSource.Snapshot(ctx)
	b.mu.Lock()
	b.calls++
	n := b.calls
	b.mu.Unlock()
	if n == 1 {
		close(b.first)
		<-b.release
	}
	return snap, err
}

// TestStaleSnapshotIgnored: a Refresh that took its snapshot before another
// Refresh installed a newer one does not roll the view back.
func TestStaleSnapshotIgnored(t *testing.T) {
	ctx := context.Background()
	src := &blockingSource{MemSource: NewMemSource(equalNodes(1, 1)...), first: make(chan struct{}), release: make(chan struct{})}
	e := New(src, Config{})
	done := make(chan error)
	go func() { done <- e.Refresh(ctx) }() // takes the old snapshot, then blocks
	<-src.first
	src.Set(equalNodes(2, 1))
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := e.Place(ctx, req1); err != nil {
			t.Fatalf("placement %d: the newer snapshot (2 nodes) was rolled back: %v", i, err)
		}
	}
}
