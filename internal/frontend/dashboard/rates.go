package dashboard

import (
	"net/http"
	"sync"
	"time"
)

// Rate history defaults: 60 buckets of 10 s, the last ten minutes.
const (
	DefaultRateInterval = 10 * time.Second
	DefaultRateBuckets  = 60
)

// Rates counts sandbox creates and failed creates in fixed time buckets (a ring
// of the most recent ones), so the overview shows rates over time without a
// metrics system. Safe for concurrent use.
type Rates struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	ring []rateBucket // ring[i] holds the bucket whose index % len == i
}

type rateBucket struct {
	index          int64 // unix time / interval; identifies the bucket
	creates, fails int
}

// RateSeries is the overview's history, oldest bucket first, with empty
// buckets as zeros.
type RateSeries struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	// Start is the first bucket's start; bucket i covers Start + i*interval.
	Start        time.Time `json:"start"`
	Creates      []int     `json:"creates"`
	CreateErrors []int     `json:"create_errors"`
}

// NewRates keeps n buckets of interval each (<= 0: the defaults).
func NewRates(interval time.Duration, n int) *Rates {
	if interval <= 0 {
		interval = DefaultRateInterval
	}
	if n <= 0 {
		n = DefaultRateBuckets
	}
	return &Rates{interval: interval, now: time.Now, ring: make([]rateBucket, n)}
}

// Record counts one create; failed says it was answered with an error.
func (r *Rates) Record(failed bool) {
	idx := r.now().UnixNano() / int64(r.interval)
	r.mu.Lock()
	defer r.mu.Unlock()
	b := &r.ring[idx%int64(len(r.ring))]
	if b.index != idx {
		*b = rateBucket{index: idx}
	}
	b.creates++
	if failed {
		b.fails++
	}
}

// Snapshot returns the history up to now.
func (r *Rates) Snapshot() RateSeries {
	n := int64(len(r.ring))
	last := r.now().UnixNano() / int64(r.interval)
	first := last - n + 1
	s := RateSeries{
		IntervalSeconds: r.interval.Seconds(),
		Start:           time.Unix(0, first*int64(r.interval)).UTC(),
		Creates:         make([]int, n),
		CreateErrors:    make([]int, n),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.ring {
		if b.index >= first && b.index <= last {
			s.Creates[b.index-first] = b.creates
			s.CreateErrors[b.index-first] = b.fails
		}
	}
	return s
}

// Count wraps an API handler: every POST /v1/sandboxes is recorded, answered
// with a status of 400 or more as failed.
func (r *Rates) Count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/sandboxes" {
			next.ServeHTTP(w, req)
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, req)
		r.Record(sw.status >= 400)
	})
}

// statusWriter remembers the status; Unwrap keeps http.ResponseController working.
type statusWriter struct {
	http.ResponseWriter
	status  int
	written bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.written {
		w.status, w.written = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.written = true
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
