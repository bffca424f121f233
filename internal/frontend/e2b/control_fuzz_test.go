package e2b_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
)

// controlBodyRoutes are the control-plane calls that take a JSON body.
var controlBodyRoutes = []string{
	"/sandboxes", "/v2/sandboxes",
	"/sandboxes/%s/timeout", "/sandboxes/%s/refreshes", "/sandboxes/%s/pause",
	"/sandboxes/%s/resume", "/sandboxes/%s/connect", "/v2/sandboxes/%s/connect",
}

// FuzzControlBodies: any body of a control-plane call is answered without a
// panic or a 5xx, an error is E2B's {"code", "message"} with the status as its
// code, a create that succeeds made exactly one sandbox with the metadata it
// was given, and a refused one made none.
func FuzzControlBodies(f *testing.F) {
	for _, b := range []string{
		`{"templateID": "base", "timeout": 60, "metadata": {"a": "b"}, "envVars": {"X": "1"}}`,
		`{"templateID": "base", "autoPause": true, "autoResume": {"enabled": true}}`,
		`{"templateID": "", "timeout": -1}`,
		`{"templateID": "base", "volumeMounts": [{}]}`,
		`{"templateID": "base", "metadata": {"dsec.e2b/x": "1"}}`,
		`{"timeout": 30}`, `{"duration": 5}`, `{"memory": false}`, `{"timeout": 9223372036854775807}`,
		``, `null`, `[]`, `{"templateID": 5}`, `{"timeout": 1e400}`, "\xff",
	} {
		for r := range controlBodyRoutes {
			f.Add(uint8(r), []byte(b))
		}
	}
	// A node that can pause without memory: the mock cannot, and its
	// not_implemented (501, TestFilesystemPauseRefused) is no server fault.
	node := &fsPauseNode{Service: agenttest.NewNode(f)}
	count := func(t *testing.T) int {
		all, err := node.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(all)
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		h := e2b.New(node, e2b.Options{Authorize: func(k string) bool { return k == testKey }, WatchInterval: time.Hour, Secret: []byte("test")})
		defer h.Close()
		call := func(method, path string, body []byte) (int, []byte) {
			req := httptest.NewRequest(method, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-API-KEY", "e2b_"+testKey)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w.Code, w.Body.Bytes()
		}
		code, b := call("POST", "/v2/sandboxes", []byte(`{"templateID": "base"}`))
		var sb struct {
			SandboxID string `json:"sandboxID"`
		}
		if code != http.StatusCreated || json.Unmarshal(b, &sb) != nil {
			t.Fatalf("create: %d %s", code, b)
		}
		path := controlBodyRoutes[int(route)%len(controlBodyRoutes)]
		if bytes.Contains([]byte(path), []byte("%s")) {
			path = fmt.Sprintf(path, sb.SandboxID)
		}
		before := count(t)
		code, b = call("POST", path, body)
		if code >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, code, b)
		}
		if code >= 400 {
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Code != code || e.Message == "" {
				t.Fatalf("POST %s %q: error %d is not E2B's error body: %s", path, body, code, b)
			}
		}
		created := path == "/sandboxes" || path == "/v2/sandboxes"
		switch n := count(t); {
		case created && code == http.StatusCreated && n != before+1,
			created && code != http.StatusCreated && n != before,
			!created && n != before:
			t.Fatalf("POST %s %q answered %d and left %d sandboxes (had %d)", path, body, code, n, before)
		}
		if !created || code != http.StatusCreated {
			return
		}
		// The sandbox carries the metadata it was created with.
		var req struct {
			Metadata map[string]string `json:"metadata"`
		}
		_ = json.Unmarshal(body, &req)
		if err := json.Unmarshal(b, &sb); err != nil {
			t.Fatal(err)
		}
		code, b = call("GET", "/sandboxes/"+sb.SandboxID, nil)
		var got struct {
			Metadata map[string]string `json:"metadata"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &got) != nil {
			t.Fatalf("get the new sandbox: %d %s", code, b)
		}
		for k, v := range req.Metadata {
			if got.Metadata[k] != v {
				t.Fatalf("created with metadata %q=%q, got %v", k, v, got.Metadata)
			}
		}
		if len(got.Metadata) != len(req.Metadata) {
			t.Fatalf("created with metadata %v, got %v", req.Metadata, got.Metadata)
		}
	})
}
