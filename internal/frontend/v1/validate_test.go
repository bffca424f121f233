package v1_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// tally counts, under a lock, what happened to requests by kind.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tally) add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[kind]++
}

// take returns the counts so far and starts again from zero.
func (c *tally) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// below stands for the interceptors under the validation (the trajectory log,
// metrics, the project guard): it counts the requests that reach it.
type below struct {
	session.Service
	seen *tally
}

func (b below) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	b.seen.add("create")
	return b.Service.Create(ctx, req)
}

func (b below) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	b.seen.add("exec")
	return b.Service.Exec(ctx, id, req)
}

func (b below) ExecStream(ctx context.Context, id string, req api.ExecRequest, s session.Stream) (api.ExecResult, error) {
	b.seen.add("exec_stream")
	return b.Service.ExecStream(ctx, id, req, s)
}

func (b below) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	b.seen.add("start_process")
	return b.Service.StartProcess(ctx, id, req)
}

// TestValidatedOnce: through /v1 and the session chain as every role composes
// it (session.Validating on top), each create, batch, exec, stream and process
// request is validated exactly once, and a malformed one is refused with
// invalid_argument before it reaches anything below the validation (a quota)
// or creates anything.
func TestValidatedOnce(t *testing.T) {
	node := agenttest.NewNode(t)
	checks, seen := &tally{n: map[string]int{}}, &tally{n: map[string]int{}}
	svc := session.Chain(node,
		session.Validating(func(what string, _ error) { checks.add(what) }),
		func(next session.Service) session.Service { return below{Service: next, seen: seen} })
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(svc, v1.Options{Token: token}).Handler()))
	t.Cleanup(srv.Close)
	e := &env{t: t, node: node, srv: srv}
	sb := e.create()
	checks.take()
	seen.take()
	path := "/v1/sandboxes/" + sb.ID

	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		checks, seen             map[string]int
	}{
		{"create", "POST", "/v1/sandboxes", `{"request_id":"one"}`, http.StatusCreated,
			map[string]int{"create": 1}, map[string]int{"create": 1}},
		{"bad create", "POST", "/v1/sandboxes", `{"pids_max":-1}`, http.StatusBadRequest,
			map[string]int{"create": 1}, map[string]int{}},
		// The node agent has no CreateBatch: the validation checks the batch once
		// and creates its members one by one below itself.
		{"batch", "POST", "/v1/sandboxes:batch", `{"sandboxes":[{},{},{}]}`, http.StatusCreated,
			map[string]int{"create_batch": 1}, map[string]int{"create": 3}},
		{"bad batch", "POST", "/v1/sandboxes:batch", `{"sandboxes":[{},{"cpu":-1}]}`, http.StatusBadRequest,
			map[string]int{"create_batch": 1}, map[string]int{}},
		{"exec", "POST", path + "/exec", `{"cmd":["true"]}`, http.StatusOK,
			map[string]int{"exec": 1}, map[string]int{"exec": 1}},
		{"bad exec", "POST", path + "/exec", `{"cmd":["true"],"timeout_ms":-1}`, http.StatusBadRequest,
			map[string]int{"exec": 1}, map[string]int{}},
		{"process", "POST", path + "/processes", `{"cmd":["true"]}`, http.StatusCreated,
			map[string]int{"start_process": 1}, map[string]int{"start_process": 1}},
		{"bad process", "POST", path + "/processes", `{"shell":"true","cmd":["true"]}`, http.StatusBadRequest,
			map[string]int{"start_process": 1}, map[string]int{}},
		// /v1 checks a stream itself, before its first event
		// (session.ExecValidated): the chain does not check it again.
		{"stream", "POST", path + "/exec/stream", `{"cmd":["true"]}` + "\n", http.StatusOK,
			map[string]int{}, map[string]int{"exec_stream": 1}},
		{"bad stream", "POST", path + "/exec/stream", `{"cmd":["true"],"stdin":"a","stdin_base64":"YQ=="}` + "\n", http.StatusBadRequest,
			map[string]int{}, map[string]int{}},
	} {
		creates := len(node.Creates())
		resp, b := e.do(tc.method, tc.path, strings.NewReader(tc.body))
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, b, tc.status)
		}
		if tc.status == http.StatusBadRequest {
			wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
			if n := len(node.Creates()); n != creates {
				t.Errorf("%s: %d creates reached the node", tc.name, n-creates)
			}
		}
		if got := checks.take(); !sameCounts(got, tc.checks) {
			t.Errorf("%s: validations %v, want %v", tc.name, got, tc.checks)
		}
		if got := seen.take(); !sameCounts(got, tc.seen) {
			t.Errorf("%s: below the validation %v, want %v", tc.name, got, tc.seen)
		}
	}
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
