package container

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
)

// TestDefenceCost measures Start of a sandbox with each defence turned off
// (interleaved rounds, p50 of each), to show where create time goes. It only
// runs with DSEC_DEFENCE_COST=1.
func TestDefenceCost(t *testing.T) {
	if os.Getenv("DSEC_DEFENCE_COST") == "" {
		t.Skip("set DSEC_DEFENCE_COST=1")
	}
	w := newWeakDriver(t)
	confs := []struct {
		name string
		w    weakening
	}{
		{"default", weakening{}},
		{"no device cgroup", weakening{devCgroup: true}},
		{"no masks", weakening{masks: true}},
		{"no xino", weakening{xino: true}},
		{"no ping range", weakening{ping: true}},
		{"no nodev", weakening{nodev: true}},
		{"all of these off", weakening{devCgroup: true, masks: true, xino: true, ping: true, nodev: true, mknod: true, netRaw: true}},
	}
	times := make([][]time.Duration, len(confs))
	for round := 0; round < 100; round++ {
		for i, c := range confs {
			w.mu.Lock()
			w.n++
			id := "cost" + string(rune('a'+i)) + time.Now().Format("150405.000000")
			w.by[id] = c.w
			w.mu.Unlock()
			t0 := time.Now()
			inst, err := w.Start(context.Background(), driver.Spec{ID: id, Layers: driver.DirLayers(w.lower), Memory: 256 << 20, Disk: 64 << 20, PidsMax: 256})
			if err != nil {
				t.Fatal(err)
			}
			times[i] = append(times[i], time.Since(t0))
			inst.Destroy(context.Background())
		}
	}
	for i, c := range confs {
		sort.Slice(times[i], func(a, b int) bool { return times[i][a] < times[i][b] })
		ts := times[i]
		t.Logf("%-18s p25 %v p50 %v", c.name, ts[len(ts)/4].Round(10*time.Microsecond), ts[len(ts)/2].Round(10*time.Microsecond))
	}
}
