package placement

import (
	"context"
	"testing"
)

// benchEngine is 160 nodes with room for everything the benchmark places.
func benchEngine(b *testing.B) *Engine {
	e, _ := newEngine(b, Config{}, equalNodes(160, 1<<40)...)
	return e
}

// BenchmarkPlace: one Place + Confirm, from GOMAXPROCS goroutines, with a refresh
// every 1000 placements so the overlay stays bounded as in a cluster.
func BenchmarkPlace(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	req := req1
	req.Layers = []string{"sha256:a", "sha256:b"}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			d, err := e.Place(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			e.Confirm(d)
			if i++; i%1000 == 0 {
				e.Refresh(ctx)
			}
		}
	})
}

// BenchmarkPlaceConstrained adds a label constraint and hardware to the filter.
func BenchmarkPlaceConstrained(b *testing.B) {
	nodes := equalNodes(160, 1<<40)
	for i := range nodes {
		nodes[i].Labels = map[string]string{"zone": []string{"a", "b"}[i%2]}
		nodes[i].Hardware = []string{"kvm"}
	}
	e, _ := newEngine(b, Config{}, nodes...)
	ctx := context.Background()
	req := Request{Backend: "container", Hardware: []string{"kvm"}, Constraints: []Constraint{{"zone", "a"}}, MilliCPU: 1}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := e.Place(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		e.Release(d)
	}
}

// BenchmarkPlaceBatch1000 places batches of 1,000 and releases them.
func BenchmarkPlaceBatch1000(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ds, err := e.PlaceBatch(ctx, req1, 1000)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			e.Release(d)
		}
	}
}

// BenchmarkRefresh: a snapshot of 160 nodes laid under the in-flight overlay.
func BenchmarkRefresh(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		e.Place(ctx, req1)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := e.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
