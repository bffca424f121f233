package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// fakeSandboxFusion echoes each call's stdin as SandboxFusion would run
// print(input()), answering every third call as told.
func fakeSandboxFusion(third func(w http.ResponseWriter)) *httptest.Server {
	var n atomic.Int64
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stdin string `json:"stdin"`
		}
		if r.URL.Path != "/run_code" || r.Header.Get("Authorization") != "Bearer tok" || json.NewDecoder(r.Body).Decode(&req) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if n.Add(1)%3 == 0 {
			third(w)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "Success", "run_result": map[string]any{"stdout": req.Stdin + "\n"}})
	}))
}

func TestSandboxFusionBenchCounts(t *testing.T) {
	for _, c := range []struct {
		name  string
		third func(w http.ResponseWriter)
		ok    bool
		key   string
	}{
		{"504s are retried by verl", func(w http.ResponseWriter) { w.WriteHeader(http.StatusGatewayTimeout) }, true, "504"},
		{"429s are negative reward", func(w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) }, false, "429"},
		{"wrong output", func(w http.ResponseWriter) {
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "Success", "run_result": map[string]any{"stdout": "x"}})
		}, false, "200"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := fakeSandboxFusion(c.third)
			defer srv.Close()
			r, err := SandboxFusion(context.Background(), SandboxFusionOptions{URL: srv.URL, Token: "tok", N: 30, Parallel: 30})
			if err != nil {
				t.Fatal(err)
			}
			if r.OnlyVerdictsOr504 != c.ok || r.HTTPStatus[c.key] < 10 || r.P50ms <= 0 || r.CallsPerS <= 0 {
				t.Fatalf("%+v", r)
			}
		})
	}
}
