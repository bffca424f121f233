package v1_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A create refused because the node is full is a 429 resource_exhausted with
// Retry-After in whole seconds, rounded up; other errors carry none.
func TestRetryAfterOnExhausted(t *testing.T) {
	// The node refuses the first start as full, asking for 1.5 s.
	var full atomic.Bool
	full.Store(true)
	e := newEnv(t, v1.Options{}, func(d driver.Driver) driver.Driver {
		return agenttest.FailStart(d, func(driver.Spec) error {
			if full.Swap(false) {
				return errdefs.Exhausted(1500*time.Millisecond, "node is at its limit")
			}
			return nil
		})
	})
	resp, b := e.do("POST", "/v1/sandboxes", strings.NewReader(`{}`))
	var eb api.ErrorBody
	mustJSON(t, b, &eb)
	if resp.StatusCode != http.StatusTooManyRequests || eb.Error == nil || eb.Error.Code != api.CodeResourceExhausted || !eb.Error.Retryable {
		t.Fatalf("create on a full node: %d %s", resp.StatusCode, b)
	}
	if got := resp.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (1.5 s rounded up)", got)
	}
	resp, _ = e.do("POST", "/v1/sandboxes", strings.NewReader(`{"image":"missing"}`))
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Retry-After") != "" {
		t.Errorf("not found: %d, Retry-After %q (want none)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// GET /v1/debug/runtime answers the server's counters, and only with the token.
func TestDebugRuntime(t *testing.T) {
	e := newEnv(t, v1.Options{})
	resp, b := e.do("GET", "/v1/debug/runtime", nil)
	var st v1.RuntimeStats
	mustJSON(t, b, &st)
	if resp.StatusCode != http.StatusOK || st.Goroutines < 1 || st.OpenFDs < 3 || st.HeapAllocBytes == 0 {
		t.Fatalf("debug runtime: %d %s", resp.StatusCode, b)
	}
	r, err := http.Get(e.srv.URL + "/v1/debug/runtime")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", r.StatusCode)
	}
}
