package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/dashboard"
	sessionpkg "github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeUsage hands out whatever use the test sets.
type fakeUsage struct {
	mu  sync.Mutex
	use map[string]api.SandboxUsage
}

func (f *fakeUsage) read(_ context.Context, ids []string) ([]api.SandboxUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.SandboxUsage
	if len(ids) == 0 {
		for _, u := range f.use {
			out = append(out, u)
		}
		return out, nil
	}
	for _, id := range ids {
		if u, ok := f.use[id]; ok {
			out = append(out, u)
		}
	}
	return out, nil
}

func (f *fakeUsage) set(id string, cpu float64, mem int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.use[id] = api.SandboxUsage{ID: id, State: "running", CPUSeconds: cpu, MemoryBytes: mem}
}

func usageEnv(t *testing.T) (*env, *fakeUsage) {
	node := agenttest.NewNode(t)
	fu := &fakeUsage{use: map[string]api.SandboxUsage{}}
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dashboard.New(dashboard.Options{Token: token, Service: node, Usage: dashboard.UsageFunc(fu.read)}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, node: node, srv: srv}, fu
}

func TestTopBusiest(t *testing.T) {
	e, fu := usageEnv(t)
	fu.set("a", 10, 100<<20)
	fu.set("b", 10, 300<<20)
	fu.set("c", 10, 200<<20)
	top := func(q string) dashboard.Top {
		code, body := e.get("/ui/api/top"+q, token)
		if code != 200 {
			t.Fatalf("top%s: %d %s", q, code, body)
		}
		var tp dashboard.Top
		if err := json.Unmarshal(body, &tp); err != nil {
			t.Fatal(err)
		}
		return tp
	}
	ids := func(tp dashboard.Top) (out []string) {
		for _, u := range tp.Busiest {
			out = append(out, u.ID)
		}
		return out
	}
	// First sample: no CPU share yet, so memory orders them.
	if got := ids(top("?limit=2")); len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Errorf("first top: %v, want [b c]", got)
	}
	// a burns CPU between the samples: it leads by CPU, not by memory.
	fu.set("a", 1000, 100<<20)
	tp := top("")
	if got := ids(tp); len(got) != 3 || got[0] != "a" {
		t.Errorf("top by cpu: %v, want a first", got)
	}
	if p := tp.Busiest[0].CPUPercent; p == nil || *p <= 0 {
		t.Errorf("a's CPU share %v", p)
	}
	if got := ids(top("?sort=memory")); got[0] != "b" {
		t.Errorf("top by memory: %v, want b first", got)
	}
	if len(tp.Nodes) != 1 || tp.Nodes[0].Name != "mock-node" {
		t.Errorf("nodes %+v", tp.Nodes)
	}
	for _, q := range []string{"?limit=0", "?limit=x", "?sort=pid"} {
		if code, body := e.get("/ui/api/top"+q, token); code != http.StatusBadRequest {
			t.Errorf("top%s: %d %s, want 400", q, code, body)
		}
	}
	if code, _ := e.get("/ui/api/top", ""); code != http.StatusUnauthorized {
		t.Errorf("top without a token: %d", code)
	}
}

func TestUsagePage(t *testing.T) {
	e, fu := usageEnv(t)
	fu.set("a", 1, 1)
	fu.set("b", 2, 2)
	code, body := e.get("/ui/api/usage?id=a&id=nope", token)
	var res struct{ Sandboxes []dashboard.Usage }
	if err := json.Unmarshal(body, &res); code != 200 || err != nil || len(res.Sandboxes) != 1 || res.Sandboxes[0].ID != "a" {
		t.Fatalf("usage: %d %s", code, body)
	}
	if code, _ := e.get("/ui/api/usage", token); code != http.StatusBadRequest {
		t.Errorf("usage without ids: %d, want 400", code)
	}
	// The node's own usage by default.
	plain := newEnv(t, "")
	plain.sandbox(nil)
	if code, body := plain.get("/ui/api/top", token); code != http.StatusOK || !strings.Contains(string(body), `"busiest":[{`) {
		t.Errorf("top from the node's usage: %d %s", code, body)
	}
	// A service without usage (session.Unimplemented's answer): not
	// implemented, said so.
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dashboard.New(dashboard.Options{Token: token, Service: noUsage{plain.node}}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if code, body := (&env{t: t, node: plain.node, srv: srv}).get("/ui/api/top", token); code != http.StatusNotImplemented {
		t.Errorf("top without usage: %d %s", code, body)
	}
}

// noUsage is a service that reports no usage.
type noUsage struct{ sessionpkg.Service }

func (noUsage) SandboxUsage(ctx context.Context, ids []string) ([]api.SandboxUsage, error) {
	return sessionpkg.Unimplemented{}.SandboxUsage(ctx, ids)
}
