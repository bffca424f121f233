package placebench

import (
	"context"
	"testing"
)

// TestSmallRun checks the benchmark's own bookkeeping on a small cluster: every
// sandbox is answered, the half-capacity phase refuses about half with Retry-After
// and nothing else, and the rejecting phase re-places.
func TestSmallRun(t *testing.T) {
	r, err := Run(context.Background(), Options{Nodes: 16, Sandboxes: 8000, Goroutines: 4, RefreshEvery: 200, Batch: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m := r.Main
	if m.Placements != 8000 || m.OtherErrors != 0 || m.Exhausted != 0 {
		t.Fatalf("main: %+v", m)
	}
	if m.SpreadMaxOverMean > 1.1 {
		t.Fatalf("main spread %v", m.SpreadMaxOverMean)
	}
	rj := r.Rejecting
	if rj.Rejections == 0 || rj.Replacements == 0 || rj.OtherErrors != 0 || rj.Placements+rj.Exhausted != 8000 {
		t.Fatalf("rejecting: %+v", rj)
	}
	h := r.HalfCapacity
	if h.OtherErrors != 0 || h.Placements+h.Exhausted != 8000 || h.Exhausted != h.ExhaustedWithRetryAfter || h.Placements < 3900 || h.Placements > 4000 {
		t.Fatalf("half capacity: %+v", h)
	}
	if r.Batch == nil || r.Batch.Error != "" {
		t.Fatalf("batch: %+v", r.Batch)
	}
	t.Logf("%+v", r)
}
