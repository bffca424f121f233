package router

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpctest"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/internal/tracing/tracingtest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// tracedNode is a node agent on the mock driver behind a real node RPC
// listener, exporting its spans as service dsec-agent; full, it rejects every
// create (admission at its limit of 0 sandboxes).
func tracedNode(t *testing.T, name string, col *tracingtest.Collector, secret []byte, full bool) (cluster.NodeStatus, *tracing.Provider) {
	t.Helper()
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: col.URL, ServiceName: "dsec-agent"})
	if err != nil {
		t.Fatal(err)
	}
	limit := 100
	if full {
		limit = -1
	}
	mgr := agenttest.New(t, agenttest.Options{Node: name, Config: func(c *agent.Config) {
		c.Tracer, c.MaxSandboxes = tp, limit
	}})
	url, _ := noderpctest.Serve(t, mgr, noderpc.HandlerOptions{Secret: secret})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = tp.Shutdown(ctx) // runs before the node's own cleanup deletes its sandboxes
	})
	return cluster.NodeStatus{State: placement.StateReady, NodeRecord: cluster.NodeRecord{Name: name, Addr: url,
		Backends: []string{mock.Name}, Capacity: placement.Resources{Sandboxes: 100}}}, tp
}

// A create through the API tier is one trace, read back from a real OTLP/HTTP
// collector: API server (HTTP > session.create) > placement > node RPC
// client > agent > driver; an exec is API server > node RPC > agent > driver. The placement span says how many nodes could take
// the sandbox, which one did and how many re-placements it took: here the
// first node tried rejects it (full), the second admits it.
func TestCreateSpanTree(t *testing.T) {
	col := tracingtest.NewCollector()
	t.Cleanup(col.Close)
	secret := []byte("0123456789abcdef0123456789abcdef")
	full, _ := tracedNode(t, "full", col, secret, true)
	ok, agentTP := tracedNode(t, "ok", col, secret, false)
	// The engine believes "full" is the emptier node, so it is tried first.
	ok.Load.Sandboxes = 50
	view := &fakeView{nodes: map[string]cluster.NodeStatus{"full": full, "ok": ok}}
	eng := placement.New(view, placement.Config{Seed: 1, MaxReplacements: 2})
	if err := eng.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: col.URL, ServiceName: "dsec-apiserver"})
	if err != nil {
		t.Fatal(err)
	}
	rt := New(Config{Nodes: view, Engine: eng, Tracer: tp, Dial: func(n cluster.NodeStatus) session.Service {
		return noderpc.NewClient(n.Addr, noderpc.ClientOptions{Secret: secret, Tracer: tp})
	}})
	t.Cleanup(func() { rt.Close() })
	m := metrics.New(metrics.Options{NoProcess: true, Backends: []string{mock.Name}, DefaultBackend: mock.Name})
	srv := v1.New(m.Wrap(rt, tp), v1.Options{Token: "t"})
	hs := httptest.NewServer(tracing.Middleware(tp, srv.Route, srv.Handler()))
	t.Cleanup(hs.Close)

	do := func(path, body, traceID string, want int) []byte {
		req, _ := http.NewRequest("POST", hs.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %s %s", path, resp.Status, b)
		}
		return b
	}
	const traceID, execTrace = "4bf92f3577b34da6a3ce929d0e0e4736", "5bf92f3577b34da6a3ce929d0e0e4737"
	var sb api.Sandbox
	if err := json.Unmarshal(do("/v1/sandboxes", `{"backend":"mock"}`, traceID, http.StatusCreated), &sb); err != nil {
		t.Fatal(err)
	}
	do("/v1/sandboxes/"+sb.ID+"/exec", `{"cmd":["true"]}`, execTrace, http.StatusOK)
	for _, p := range []*tracing.Provider{tp, agentTP} {
		if err := p.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	spans := col.Spans()
	wantTree(t, spans, traceID, []string{
		"(root) > POST /v1/sandboxes",
		"POST /v1/sandboxes > session.create",
		"session.create > placement",
		"placement > noderpc.Create", // twice: the rejection and the admission
		"noderpc.Create > agent.create",
		"agent.create > agent.admission",
		"agent.create > driver.start",
	})
	// An exec: API server > node RPC > agent > driver.
	wantTree(t, spans, execTrace, []string{
		"(root) > POST /v1/sandboxes/{id}/exec",
		"POST /v1/sandboxes/{id}/exec > session.exec",
		"session.exec > noderpc.Exec",
		"noderpc.Exec > agent.exec",
		"agent.exec > driver.exec",
	})
	services := map[string]string{}
	var rpcs int
	for _, sp := range spans {
		if sp.TraceID() != traceID {
			continue
		}
		services[sp.GetName()] = sp.Service
		switch sp.GetName() {
		case "placement":
			if n := sp.Attr("dsec.placement.node"); n != "ok" {
				t.Errorf("placement chose %q, want ok", n)
			}
			if v := intAttr(sp, "dsec.placement.replacements"); v != 1 {
				t.Errorf("placement re-placements %d, want 1", v)
			}
			if v := intAttr(sp, "dsec.placement.candidates"); v != 2 {
				t.Errorf("placement candidates %d, want 2", v)
			}
			if ev := sp.GetEvents(); len(ev) != 1 || ev[0].GetName() != "rejected" {
				t.Errorf("placement events %v, want one rejection", ev)
			}
		case "noderpc.Create":
			rpcs++
		}
	}
	if rpcs != 2 {
		t.Errorf("%d noderpc.Create spans, want 2 (full's rejection, ok's admission)", rpcs)
	}
	if services["placement"] != "dsec-apiserver" || services["noderpc.Create"] != "dsec-apiserver" || services["agent.create"] != "dsec-agent" {
		t.Errorf("spans by service: %v", services)
	}
}

// wantTree checks that trace traceID has exactly the "parent > child" edges want.
func wantTree(t *testing.T, spans []tracingtest.Span, traceID string, want []string) {
	t.Helper()
	got := tracingtest.Tree(spans, traceID)
	for _, e := range want {
		if !got[e] {
			t.Errorf("trace %s lacks %q; it has %v", traceID, e, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("trace %s has %d edges, want %d: %v", traceID, len(got), len(want), got)
	}
}

func intAttr(sp tracingtest.Span, key string) int64 {
	for _, a := range sp.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetIntValue()
		}
	}
	return -1
}
