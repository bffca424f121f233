package cgroups

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkCreateDelete measures the sandbox-create hot path: Create with
// all three limits, then Delete, on the real host (root only).
func BenchmarkCreateDelete(b *testing.B) {
	l := Limits{CPU: 1, MemoryBytes: 256 << 20, PidsMax: 256}
	run := func(b *testing.B, h *Hierarchy) {
		ctx := context.Background()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			g, err := h.Create("sb-"+strconv.Itoa(i), l)
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Delete(ctx); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	b.Run("host", func(b *testing.B) {
		run(b, hostHierarchy(b))
	})
	b.Run("host-devices", func(b *testing.B) {
		l.Devices = DevicePolicy{Restrict: true, Allow: []DeviceRule{{'c', 1, 3, "rwm"}, {'c', 1, 5, "rwm"},
			{'c', 1, 7, "rwm"}, {'c', 1, 8, "rwm"}, {'c', 1, 9, "rwm"}, {'c', 5, 0, "rwm"}, {'c', 5, 2, "rwm"}, {'c', 136, -1, "rwm"}}}
		defer func() { l.Devices = DevicePolicy{} }()
		run(b, hostHierarchy(b))
	})
	b.Run("host-unified-nolimits", func(b *testing.B) {
		// The hybrid host's unified mount has no controllers: no limits.
		l = Limits{}
		run(b, hostV2Hierarchy(b))
	})
}
