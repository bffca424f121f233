package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/metrics/metricstest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/internal/tracing/tracingtest"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

const token = "metrics-test-token"

// stack is a node as the daemon assembles it, on the mock driver: agent ->
// metrics decorator -> trajectory log -> /v1 server, behind the request-ID,
// tracing and HTTP-metrics middleware, with /metrics behind the token.
type stack struct {
	m   *metrics.Metrics
	mgr *agent.Manager
	tp  *tracing.Provider
	col *tracingtest.Collector // receives the spans over OTLP/HTTP
	url string
	cl  *client.Client
}

// newStack starts the node; wrap (optional) wraps the mock driver.
func newStack(t testing.TB, wrap func(driver.Driver) driver.Driver) *stack {
	t.Helper()
	col := tracingtest.NewCollector()
	t.Cleanup(col.Close)
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: col.URL})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{Backends: []string{mock.Name}, DefaultBackend: mock.Name, NoProcess: true})
	var drv driver.Driver = agenttest.Mock(t)
	if wrap != nil {
		drv = wrap(drv)
	}
	mgr := agenttest.New(t, agenttest.Options{Node: "test", Driver: drv, Config: func(c *agent.Config) {
		c.Tracer, c.Observer, c.MaxCreating = tp, m, 64
	}})
	if err := m.Register(m.NewNodeCollector(agentSandboxes{mgr}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	// The stack every role composes: trajectory log, then metrics, then the node.
	tsvc := session.Chain(judge{mgr}, trajectory.Interceptor(trajectory.NewMem(), trajectory.Options{OnStep: m.TrajectoryStep}),
		m.Interceptor(tp))
	srv := v1.New(tsvc, v1.Options{Token: token, Steps: true})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", requireToken(m.Handler()))
	mux.Handle("/", srv.Handler())
	route := func(r *http.Request) string {
		if r.URL.Path == "/metrics" {
			return "/metrics"
		}
		return srv.Route(r)
	}
	hs := httptest.NewServer(tracing.Middleware(tp, route, m.HTTP(route, mux)))
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = tp.Shutdown(ctx) // before the node's own cleanup deletes its sandboxes
	})
	return &stack{m: m, mgr: mgr, tp: tp, col: col, url: hs.URL, cl: client.New(hs.URL, token)}
}

// agentSandboxes is the agent as the collector's Sandboxes (the role's
// assembly has the same adapter).
type agentSandboxes struct{ m *agent.Manager }

func (s agentSandboxes) Usage(memory bool) []api.SandboxUsage {
	if memory {
		return s.m.Usage(nil, agent.MemoryCounter)
	}
	return s.m.Usage(nil, 0)
}

func (s agentSandboxes) Capacity() int { return s.m.Capacity() }

func (s agentSandboxes) WarmPool() (waiting, size int) { return s.m.WarmPool() }

// judge is a FnCall engine whose verdict is the file "verdict".
// judge is the agent with a FnCall that answers the verdict the request names.
type judge struct{ *agent.Manager }

func (judge) FnCall(_ context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	return api.FnCallResult{Verdict: req.Files["verdict"]}, nil
}

func requireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// scrape reads /metrics with the token.
func scrape(t testing.TB, url string) metricstest.Families {
	t.Helper()
	f, err := metricstest.Scrape(url+"/metrics", token)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// moved is one expected change of a series between two scrapes (nil labels:
// every series of the metric added up).
type moved struct {
	name   string
	labels []string
	want   float64
}

// wantMoved checks that each series moved by exactly its amount.
func wantMoved(t testing.TB, before, after metricstest.Families, ms []moved) {
	t.Helper()
	for _, c := range ms {
		if got := after.Value(c.name, c.labels...) - before.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
