package v1_test

import (
	"net/http"
	"strings"
	"testing"

	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

func (e *env) count() int {
	e.t.Helper()
	resp, body := e.do("GET", "/v1/sandboxes", nil)
	if resp.StatusCode != 200 {
		e.t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	var l api.ListSandboxesResponse
	mustJSON(e.t, body, &l)
	return len(l.Sandboxes)
}

// A service without CreateBatch (not_implemented) gets the server's one-by-one batch: all or
// nothing, and idempotent by request ID.
func TestBatchCreate(t *testing.T) {
	e := newEnv(t, v1.Options{})
	body := `{"sandboxes":[{"request_id":"r0"},{"request_id":"r1","labels":{"k":"v"}},{"request_id":"r2"}]}`
	resp, b := e.do("POST", "/v1/sandboxes:batch", strings.NewReader(body))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("batch: %d %s", resp.StatusCode, b)
	}
	var first api.BatchCreateResponse
	mustJSON(t, b, &first)
	if len(first.Sandboxes) != 3 || first.Sandboxes[1].Labels["k"] != "v" || first.Sandboxes[2].RequestID != "r2" {
		t.Fatalf("batch answered %+v", first)
	}
	resp, b = e.do("POST", "/v1/sandboxes:batch", strings.NewReader(body))
	var again api.BatchCreateResponse
	mustJSON(t, b, &again)
	for i := range first.Sandboxes {
		if resp.StatusCode != http.StatusCreated || again.Sandboxes[i].ID != first.Sandboxes[i].ID {
			t.Fatalf("retried batch: %d %+v", resp.StatusCode, again)
		}
	}
	if n := e.count(); n != 3 {
		t.Fatalf("%d sandboxes after a retried batch of 3", n)
	}

	// One bad sandbox: nothing is kept.
	resp, b = e.do("POST", "/v1/sandboxes:batch", strings.NewReader(`{"sandboxes":[{},{},{"image":"missing"},{}]}`))
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
	if n := e.count(); n != 3 {
		t.Fatalf("a failed batch left %d sandboxes behind", n-3)
	}

	for name, c := range map[string]struct {
		body   string
		status int
		code   api.Code
	}{
		"empty":          {`{"sandboxes":[]}`, 400, api.CodeInvalidArgument},
		"no list":        {`{}`, 400, api.CodeInvalidArgument},
		"duplicate IDs":  {`{"sandboxes":[{"request_id":"x"},{"request_id":"x"}]}`, 400, api.CodeInvalidArgument},
		"negative field": {`{"sandboxes":[{"memory_bytes":-1}]}`, 400, api.CodeInvalidArgument},
		"unknown field":  {`{"sandboxes":[{"cpus":1}]}`, 400, api.CodeInvalidArgument},
	} {
		resp, b := e.do("POST", "/v1/sandboxes:batch", strings.NewReader(c.body))
		if e := wantError(t, resp, b, c.status, c.code); e == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := e.count(); n != 3 {
		t.Fatalf("refused batches created %d sandboxes", n-3)
	}
}

// A single node has no node list and no drain.
func TestNodesOnSingleNode(t *testing.T) {
	e := newEnv(t, v1.Options{})
	resp, b := e.do("GET", "/v1/nodes", nil)
	wantError(t, resp, b, http.StatusNotImplemented, api.CodeNotImplemented)
	resp, b = e.do("POST", "/v1/nodes/x/drain", nil)
	wantError(t, resp, b, http.StatusNotImplemented, api.CodeNotImplemented)
}

// Authorize replaces the single token.
func TestAuthorizeOption(t *testing.T) {
	e := newEnv(t, v1.Options{Authorize: func(tok string) bool { return tok == "other" }})
	resp, b := e.do("GET", "/v1/sandboxes", nil) // sends the env's token
	wantError(t, resp, b, http.StatusUnauthorized, api.CodeUnauthorized)
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer other")
	r2, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 200 {
		t.Fatalf("Authorize accepted token answered %d", r2.StatusCode)
	}
}
