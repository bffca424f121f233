package sandboxfusion

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// slotted is a FnCall service with a fixed number of slots that refuses a call
// beyond them, as a node at --max-fncalls or an API server whose nodes are all
// full does.
type slotted struct {
	slots    chan struct{}
	hold     time.Duration
	refused  atomic.Int64
	maxInUse atomic.Int64
	inUse    atomic.Int64
}

func (s *slotted) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	select {
	case s.slots <- struct{}{}:
	default:
		s.refused.Add(1)
		return api.FnCallResult{}, errdefs.Exhausted(time.Second, "all %d slots busy", cap(s.slots))
	}
	defer func() { <-s.slots }()
	n := s.inUse.Add(1)
	defer s.inUse.Add(-1)
	for {
		m := s.maxInUse.Load()
		if n <= m || s.maxInUse.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-time.After(s.hold):
	case <-ctx.Done():
		return api.FnCallResult{}, ctx.Err()
	}
	return accepted(req)
}

// burst sends n concurrent /run_code calls and counts the answers by status.
func burst(t *testing.T, h http.Handler, n int) map[int]int {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(srv.URL+"/run_code", "application/json",
				strings.NewReader(fmt.Sprintf(`{"code":"print(%d)","language":"python","stdin":"%d"}`, i, i)))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			got[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return got
}

func TestBurstBeyondTheSlotsIsQueued(t *testing.T) {
	fc := &slotted{slots: make(chan struct{}, 4), hold: 10 * time.Millisecond}
	got := burst(t, New(fc, Options{QueueWait: 30 * time.Second}), 100)
	if got[200] != 100 {
		t.Fatalf("100 calls on 4 slots: answers %v, want 100 verdicts", got)
	}
	if fc.refused.Load() == 0 {
		t.Fatal("no call was refused by the slots: the burst did not exceed them")
	}
	if fc.maxInUse.Load() > 4 {
		t.Fatalf("%d calls ran at once on 4 slots", fc.maxInUse.Load())
	}
}

func TestBurstPastTheBudgetIs504(t *testing.T) {
	fc := &slotted{slots: make(chan struct{}, 2), hold: 300 * time.Millisecond}
	got := burst(t, New(fc, Options{QueueWait: 50 * time.Millisecond}), 20)
	if got[200]+got[504] != 20 || got[504] == 0 || got[200] < 2 {
		t.Fatalf("20 calls on 2 slots held 300 ms with a 50 ms budget: answers %v, want verdicts and 504s only", got)
	}
	// A full queue answers 504 at once, not 429.
	fc = &slotted{slots: make(chan struct{}, 1), hold: 300 * time.Millisecond}
	got = burst(t, New(fc, Options{QueueWait: 10 * time.Second, MaxQueued: 2}), 10)
	if got[200]+got[504] != 10 || got[504] == 0 {
		t.Fatalf("10 calls on 1 slot with room for 2 waiting: answers %v, want verdicts and 504s only", got)
	}
}
