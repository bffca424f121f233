package node

import (
	"context"
	"net"
	"net/http"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/fncall"
	"github.com/dsec-dev/dsec/internal/frontend/sandboxfusion"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/pkg/api"
)

// MetricsPath is where the API listener serves Prometheus metrics (behind the
// API token; ServeMetrics serves them open on a listener of their own).
const MetricsPath = "/metrics"

// observability is the node's metrics registry and tracer provider, and the
// metrics decorator over the agent (set once it exists).
type observability struct {
	metrics *metrics.Metrics
	tracing *tracing.Provider
	svc     session.Service
}

func newObservability(ctx context.Context, cfg Config) (observability, error) {
	tp := cfg.Tracing
	if tp == nil {
		var err error
		if tp, err = tracing.New(ctx, tracing.Config{Endpoint: cfg.OTLPEndpoint, ServiceName: "dsec-server"}); err != nil {
			return observability{}, err
		}
	}
	m := metrics.New(metrics.Options{DefaultBackend: api.BackendContainer,
		Backends: []string{api.BackendContainer, api.BackendMicroVM, api.BackendFullVM, api.BackendFnCall}})
	return observability{metrics: m, tracing: tp}, nil
}

// route names the route r goes to, for metrics labels and span names.
func (d *Daemon) route(r *http.Request) string {
	switch {
	case d.E2B.Owns(r):
		return "e2b"
	case r.URL.Path == MetricsPath:
		return MetricsPath
	}
	for _, p := range sandboxfusion.Routes() {
		if p == r.Method+" "+r.URL.Path {
			return p
		}
	}
	return d.Server.Route(r)
}

// observe wraps the main listener's handler: request ID and server span first
// (so every log line of the request carries its ID), then the HTTP metrics.
func (d *Daemon) observe(h http.Handler) http.Handler {
	return httpkit.RequestID(d.obs.tracing, d.route, d.obs.metrics.HTTP(d.route, h))
}

// Metrics is the node's metrics registry.
func (d *Daemon) Metrics() *metrics.Metrics { return d.obs.metrics }

// MetricsHandler serves GET /metrics without a token.
func (d *Daemon) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, d.obs.metrics.Handler())
	return mux
}

// ServeMetrics serves Prometheus metrics on l WITHOUT a token (dsec server
// --metrics-listen), until Shutdown.
func (d *Daemon) ServeMetrics(l net.Listener) error { return d.serveOn(l, d.MetricsHandler()) }

// nodeSandboxes is the node agent as the metrics' Sandboxes.
type nodeSandboxes struct{ m *agent.Manager }

func (s nodeSandboxes) Usage(memory bool) []api.SandboxUsage {
	var c agent.Counters
	if memory {
		c = agent.MemoryCounter
	}
	return s.m.Usage(nil, c)
}

func (s nodeSandboxes) Capacity() int { return s.m.Capacity() }

func (s nodeSandboxes) WarmPool() (waiting, size int) { return s.m.WarmPool() }

// layerStats is layerd's control API as the metrics' LayerStats.
type layerStats struct{ c *lazy.Client }

func (l layerStats) LayerStats(ctx context.Context) (metrics.Layers, error) {
	st, err := l.c.Stats(ctx)
	if err != nil || st.Pid == 0 { // Pid 0: layerd is not running (no layered sandbox yet)
		return metrics.Layers{}, err
	}
	out := metrics.Layers{Running: true, CacheBytes: st.Cache.Bytes}
	for _, ls := range st.Layers {
		out.FetchedBytes += ls.FetchedBytes
		out.BlobBytes += ls.BlobSize
		out.CacheHits += ls.CacheHits
		out.CacheMisses += ls.CacheMisses
		if ls.Mounted {
			out.Mounted++
		}
	}
	return out, nil
}

// fnCallPools is the FnCall engine as the metrics' FnCallPools.
type fnCallPools struct{ e *fncall.Engine }

func (f fnCallPools) Pools() []metrics.Pool {
	ps := f.e.Pools()
	out := make([]metrics.Pool, len(ps))
	for i, p := range ps {
		out[i] = metrics.Pool{Image: p.Image, Slots: p.Slots, Busy: p.Busy}
	}
	return out
}
