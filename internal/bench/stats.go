// Package bench implements dsec's benchmarks (`dsec bench create|exec|density`):
// each starts its own node in a scratch data directory, measures, tears everything
// down, and, where asked, runs a peer runtime (crun, runc) on the same root file
// system in the same run so the ratio is taken under the same conditions.
package bench

import (
	"math"
	"sort"
	"time"
)

// Latencies summarises a set of durations: the shared latency figures of
// every bench's JSON.
type Latencies struct {
	Minms float64 `json:"min_ms"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	Maxms float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) Latencies {
	if len(ds) == 0 {
		return Latencies{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		if i < 0 {
			i = 0
		}
		return ms(s[i])
	}
	return Latencies{Minms: ms(s[0]), P50ms: pct(0.50), P99ms: pct(0.99), Maxms: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

func round(f float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(f*p) / p
}
