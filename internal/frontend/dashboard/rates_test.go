package dashboard

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestRatesRing(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRates(10*time.Second, 3)
	r.now = func() time.Time { return now }
	r.Record(false)
	r.Record(true)
	now = now.Add(10 * time.Second)
	r.Record(false)
	s := r.Snapshot()
	if got, want := s.Creates, []int{0, 2, 1}; !equal(got, want) {
		t.Errorf("creates %v, want %v", got, want)
	}
	if got, want := s.CreateErrors, []int{0, 1, 0}; !equal(got, want) {
		t.Errorf("errors %v, want %v", got, want)
	}
	if !s.Start.Equal(time.Unix(990, 0)) {
		t.Errorf("start %v", s.Start)
	}
	// Three intervals later the old buckets have left the window (and their
	// ring slots are reused, not added to).
	now = now.Add(30 * time.Second)
	r.Record(true)
	s = r.Snapshot()
	if got, want := s.Creates, []int{0, 0, 1}; !equal(got, want) {
		t.Errorf("after the window moved: creates %v, want %v", got, want)
	}
}

func TestRatesCount(t *testing.T) {
	r := NewRates(time.Minute, 2)
	h := r.Count(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("fail") != "" {
			http.Error(w, "no", http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for _, target := range []string{"/v1/sandboxes", "/v1/sandboxes?fail=1", "/v1/sandboxes"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", target, nil))
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/sandboxes", nil))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/sandboxes/x/exec", nil))
	s := r.Snapshot()
	if s.Creates[1] != 3 || s.CreateErrors[1] != 1 {
		t.Errorf("creates %v errors %v, want 3 creates and 1 failure in the last bucket", s.Creates, s.CreateErrors)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
