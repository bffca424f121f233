package v1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// listService serves a prepared sandbox list (instead of the node's) for the
// list query tests: sandboxes of several nodes, backends and states, which
// one node over the mock driver cannot have.
type listService struct {
	session.Service
	list []api.Sandbox
}

func (f listService) List(context.Context) ([]api.Sandbox, error) {
	return append([]api.Sandbox(nil), f.list...), nil
}

func listFixture(n int) []api.Sandbox {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]api.Sandbox, n)
	states := []string{api.StateRunning, api.StatePaused, api.StateExited}
	for i := range out {
		backend := api.BackendContainer
		if i%4 == 3 {
			backend = api.BackendMicroVM
		}
		node := "node-a"
		if i%2 == 1 {
			node = "node-b"
		}
		out[i] = api.Sandbox{
			ID: fmt.Sprintf("sb-%016x.%s", i, node), Backend: backend, State: states[i%3],
			// Every pair shares a creation time: the cursor must break ties by ID.
			CreatedAt: t0.Add(time.Duration(i/2) * time.Second),
			Labels:    map[string]string{"team": []string{"rl", "eval"}[i%2], "idx": fmt.Sprint(i)},
		}
	}
	return out
}

func listEnv(t *testing.T, list []api.Sandbox) *env {
	t.Helper()
	node := agenttest.NewNode(t)
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(listService{node, list}, v1.Options{Token: token}).Handler()))
	t.Cleanup(srv.Close)
	return &env{t: t, node: node, srv: srv}
}

func (e *env) list(query string) (int, api.ListSandboxesResponse, api.Error) {
	e.t.Helper()
	resp, body := e.do("GET", "/v1/sandboxes"+query, nil)
	var out api.ListSandboxesResponse
	var apiErr api.ErrorBody
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &out); err != nil {
			e.t.Fatalf("%s: %v", body, err)
		}
	} else {
		if err := json.Unmarshal(body, &apiErr); err != nil || apiErr.Error == nil {
			e.t.Fatalf("error body %s: %v", body, err)
		}
		return resp.StatusCode, out, *apiErr.Error
	}
	return resp.StatusCode, out, api.Error{}
}

func TestListSandboxesDefaultUnchanged(t *testing.T) {
	e := listEnv(t, listFixture(30))
	code, got, _ := e.list("")
	if code != 200 || len(got.Sandboxes) != 30 || got.NextCursor != "" || got.Total != nil {
		t.Fatalf("GET /v1/sandboxes: %d, %d sandboxes, cursor %q, total %v; want all 30, no paging fields",
			code, len(got.Sandboxes), got.NextCursor, got.Total)
	}
	for i, sb := range got.Sandboxes {
		if want := listFixture(30)[i].ID; sb.ID != want {
			t.Fatalf("item %d = %s, want %s (oldest first)", i, sb.ID, want)
		}
	}
}

func TestListSandboxesFilters(t *testing.T) {
	all := listFixture(60)
	e := listEnv(t, all)
	count := func(pred func(api.Sandbox) bool) int {
		n := 0
		for _, sb := range all {
			if pred(sb) {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		query string
		want  func(api.Sandbox) bool
	}{
		{"state=paused", func(s api.Sandbox) bool { return s.State == api.StatePaused }},
		{"state=paused,exited", func(s api.Sandbox) bool { return s.State != api.StateRunning }},
		{"state=paused&state=running", func(s api.Sandbox) bool { return s.State != api.StateExited }},
		{"backend=microvm", func(s api.Sandbox) bool { return s.Backend == api.BackendMicroVM }},
		{"node=node-b", func(s api.Sandbox) bool { return s.ID[len(s.ID)-1] == 'b' }},
		{"label=team=rl", func(s api.Sandbox) bool { return s.Labels["team"] == "rl" }},
		{"label=team", func(s api.Sandbox) bool { return true }},
		{"label=nope", func(s api.Sandbox) bool { return false }},
		{"label=team=eval&label=idx=7", func(s api.Sandbox) bool { return s.Labels["idx"] == "7" }},
		{"label=team=rl&backend=microvm&state=running", func(s api.Sandbox) bool {
			return s.Labels["team"] == "rl" && s.Backend == api.BackendMicroVM && s.State == api.StateRunning
		}},
	} {
		code, got, apiErr := e.list("?" + c.query)
		if code != 200 {
			t.Fatalf("%s: %d %+v", c.query, code, apiErr)
		}
		if want := count(c.want); len(got.Sandboxes) != want {
			t.Errorf("%s: %d sandboxes, want %d", c.query, len(got.Sandboxes), want)
		}
		for _, sb := range got.Sandboxes {
			if !c.want(sb) {
				t.Errorf("%s: %s does not match (%s %s %v)", c.query, sb.ID, sb.State, sb.Backend, sb.Labels)
			}
		}
	}
}

// TestListSandboxesPaging walks every page, both orders, with a filter: each
// sandbox comes exactly once, in order, and total counts the matches.
func TestListSandboxesPaging(t *testing.T) {
	all := listFixture(103)
	// The service's order is not trusted: the server sorts what it is given.
	shuffled := append([]api.Sandbox(nil), all...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	e := listEnv(t, shuffled)
	for _, order := range []string{"asc", "desc"} {
		for _, filter := range []string{"", "&state=running"} {
			var seen []string
			cur := ""
			for pages := 0; ; pages++ {
				if pages > 50 {
					t.Fatal("paging does not end")
				}
				q := "?limit=10&order=" + order + filter
				if cur != "" {
					q += "&cursor=" + url.QueryEscape(cur)
				}
				code, got, apiErr := e.list(q)
				if code != 200 {
					t.Fatalf("%s: %d %+v", q, code, apiErr)
				}
				if len(got.Sandboxes) > 10 {
					t.Fatalf("%s: page of %d", q, len(got.Sandboxes))
				}
				for _, sb := range got.Sandboxes {
					seen = append(seen, sb.ID)
				}
				if got.Total == nil {
					t.Fatalf("%s: no total", q)
				}
				if got.NextCursor == "" {
					break
				}
				cur = got.NextCursor
			}
			var want []string
			for _, sb := range all {
				if filter == "" || sb.State == api.StateRunning {
					want = append(want, sb.ID)
				}
			}
			if order == "desc" {
				for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
					want[i], want[j] = want[j], want[i]
				}
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("order=%s%s: pages gave\n%v\nwant\n%v", order, filter, seen, want)
			}
		}
	}
}

func TestListSandboxesBadQuery(t *testing.T) {
	e := listEnv(t, listFixture(5))
	for _, q := range []string{
		"state=sleeping", "state=running,bogus", "backend=docker", "node=Bad_Node", "label==x",
		"limit=0", "limit=1001", "limit=ten", "cursor=%21%21", "cursor=" + "bm9jb2xvbg", "order=up", "sort=id",
	} {
		code, _, apiErr := e.list("?" + q)
		if code != http.StatusBadRequest || apiErr.Code != api.CodeInvalidArgument || apiErr.Message == "" {
			t.Errorf("?%s: %d %+v, want 400 invalid_argument with a message", q, code, apiErr)
		}
	}
	// Refused input changed nothing: the list still answers.
	if code, got, _ := e.list("?state=running"); code != 200 || len(got.Sandboxes) != 2 {
		t.Fatalf("after bad queries: %d, %d sandboxes", code, len(got.Sandboxes))
	}
}
