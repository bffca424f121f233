package apiserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/frontend/dashboard"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/frontend/sandboxfusion"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/pkg/api"
)

// MetricsPath is where an API server serves Prometheus metrics (behind the
// API token; ServeMetrics serves them open on a listener of their own).
const MetricsPath = "/metrics"

// batches is the interceptor that counts the cluster's batch creates
// (metrics.Cluster.Batch); the API tier's chain puts it above the project
// guard.
type batches struct {
	session.Service
	cl *metrics.Cluster
}

// countBatches returns the batches interceptor over cl.
func countBatches(cl *metrics.Cluster) session.Interceptor {
	return func(next session.Service) session.Service { return batches{Service: next, cl: cl} }
}

func (b batches) CreateBatch(ctx context.Context, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	t0 := time.Now()
	out, err := b.Service.CreateBatch(ctx, reqs)
	backend := ""
	if len(reqs) > 0 {
		backend = reqs[0].Backend
	}
	b.cl.Batch(backend, len(reqs), time.Since(t0), err)
	return out, err
}

// newMetrics returns the API tier's registry: the session decorator's and
// HTTP metrics plus the cluster's (metrics.Cluster over the watcher).
func newMetrics(w *cluster.Watcher) (*metrics.Metrics, *metrics.Cluster, error) {
	m := metrics.New(metrics.Options{DefaultBackend: api.BackendContainer,
		Backends: []string{api.BackendContainer, api.BackendMicroVM, api.BackendFullVM, api.BackendFnCall}})
	cl, err := m.NewCluster(func() []metrics.ClusterNode { return clusterNodes(w.Nodes()) })
	if err != nil {
		return nil, nil, err
	}
	return m, cl, nil
}

func clusterNodes(ns []cluster.NodeStatus) []metrics.ClusterNode {
	out := make([]metrics.ClusterNode, len(ns))
	for i, n := range ns {
		out[i] = metrics.ClusterNode{Name: n.Name, State: string(n.State),
			CapacitySandboxes: n.Capacity.Sandboxes, Sandboxes: n.Load.Sandboxes}
	}
	return out
}

// watcherNodes is the dashboard's NodeSource: every node of the cluster from
// the watcher (no calls to the nodes); the overview counts their sandboxes from
// the router's list.
type watcherNodes struct{ w *cluster.Watcher }

func (s watcherNodes) Nodes(context.Context) ([]dashboard.Node, error) {
	ns := s.w.Nodes()
	out := make([]dashboard.Node, len(ns))
	for i, n := range ns {
		out[i] = dashboard.Node{Name: n.Name, Addr: n.Addr, State: string(n.State), Version: n.Version, Backends: n.Backends,
			MaxSandboxes: n.Capacity.Sandboxes, Score: placement.Score(n.Capacity, n.Load)}
	}
	return out, nil
}

// Handler is everything an API server's listener serves: /v1, GET /metrics
// (same tokens as /v1) and the dashboard at /ui/, with request IDs, server
// spans and HTTP metrics around them.
func (a *APIServer) Handler() http.Handler {
	mux := http.NewServeMux()
	rates := dashboard.NewRates(0, 0)
	mux.Handle(dashboard.Prefix, dashboard.New(dashboard.Options{Authorize: adminToken(a.Tokens), Service: a.svc, Nodes: watcherNodes{a.Watcher},
		Rates: rates, Usage: a.Router.SandboxUsage, Logger: a.log}))
	mux.Handle("GET "+MetricsPath, a.guard(adminToken(a.Tokens), a.Metrics.Handler()))
	sf := a.guard(a.Tokens.Match, a.sandboxFusion()) // FnCalls and /run_jupyter sandboxes: any project's token
	for _, p := range sandboxfusion.Routes() {
		mux.Handle(p, sf)
	}
	mux.Handle("/", a.Server.Handler())
	return a.observe(rates.Count(e2b.Mount(mux, a.E2B)))
}

func (a *APIServer) route(r *http.Request) string {
	switch {
	case r.URL.Path == MetricsPath:
		return MetricsPath
	case len(r.URL.Path) >= len(dashboard.Prefix) && r.URL.Path[:len(dashboard.Prefix)] == dashboard.Prefix:
		return dashboard.Prefix
	}
	return a.Server.Route(r)
}

// observe: request ID and server span first (so every log line of the request
// carries its ID), then the HTTP metrics.
func (a *APIServer) observe(h http.Handler) http.Handler {
	return tracing.Middleware(a.tracing, a.route, a.Metrics.HTTP(a.route, h))
}

// guard requires a token match accepts before h (httpkit.BearerAuth: the
// /v1 refusal).
func (a *APIServer) guard(match func(string) bool, h http.Handler) http.Handler {
	return httpkit.Match(match).Wrap(h)
}

// ServeMetrics serves GET /metrics on l WITHOUT a token (dsec apiserver
// --metrics-listen), until Shutdown.
func (a *APIServer) ServeMetrics(l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, a.Metrics.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	a.mu.Lock()
	a.extra = append(a.extra, srv)
	a.mu.Unlock()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
