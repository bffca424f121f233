package e2b

import (
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
)

// TestMetricsSeries: samples are kept oldest first, at most one per
// metricsBucket and metricsKeep per sandbox; a window returns those taken
// from its start to metricsBucket after its end; forget drops them.
func TestMetricsSeries(t *testing.T) {
	var c cpuSamples
	t0 := time.Unix(1_700_000_000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * metricsBucket) }
	if c.fresh("a", t0) || len(c.window("a", nil, nil)) != 0 {
		t.Fatal("a sandbox never sampled has samples")
	}
	for i := range metricsKeep + 10 {
		c.record("a", e2bapi.SandboxMetric{Timestamp: at(i), MemUsed: int64(i)})
		// a concurrent request's sample of the same moment is not kept twice
		c.record("a", e2bapi.SandboxMetric{Timestamp: at(i).Add(time.Second), MemUsed: -1})
	}
	c.record("b", e2bapi.SandboxMetric{Timestamp: at(0)})
	all := c.window("a", nil, nil)
	if len(all) != metricsKeep || all[0].MemUsed != 10 || all[len(all)-1].MemUsed != metricsKeep+9 {
		t.Fatalf("kept %d samples, %d..%d; want %d, 10..%d", len(all), all[0].MemUsed, all[len(all)-1].MemUsed, metricsKeep, metricsKeep+9)
	}
	for i := 1; i < len(all); i++ {
		if !all[i].Timestamp.After(all[i-1].Timestamp) {
			t.Fatalf("not oldest first at %d", i)
		}
	}
	last := at(metricsKeep + 9)
	if !c.fresh("a", last.Add(metricsBucket-time.Millisecond)) || c.fresh("a", last.Add(metricsBucket)) {
		t.Error("fresh: want true within metricsBucket of the last sample, false after")
	}
	start, end := at(20), at(30)
	w := c.window("a", &start, &end)
	// from 20 to 31 (the bucket after the end) inclusive
	if len(w) != 12 || w[0].MemUsed != 20 || w[len(w)-1].MemUsed != 31 {
		t.Errorf("window [20, 30]: %d samples %d..%d, want 12 from 20 to 31", len(w), w[0].MemUsed, w[len(w)-1].MemUsed)
	}
	early, earlyEnd := t0.Add(-time.Hour), t0.Add(-30*time.Minute)
	if w := c.window("a", &early, &earlyEnd); len(w) != 0 {
		t.Errorf("a window before any sample: %d samples", len(w))
	}
	c.forget("a")
	if len(c.window("a", nil, nil)) != 0 || len(c.window("b", nil, nil)) != 1 {
		t.Error("forget: a's samples stay or b's went")
	}
}

// TestMetricsSeriesBounded: the number of sandboxes with samples is bounded.
func TestMetricsSeriesBounded(t *testing.T) {
	var c cpuSamples
	t0 := time.Unix(1_700_000_000, 0)
	for i := range maxCPUSamples + 50 {
		c.record(string(rune('a'+i%26))+time.Duration(i).String(), e2bapi.SandboxMetric{Timestamp: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	if n := len(c.series); n > maxCPUSamples {
		t.Fatalf("%d sandboxes with samples, want at most %d", n, maxCPUSamples)
	}
}
