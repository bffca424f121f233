package node

import (
	"net"
	"net/http"

	"github.com/dsec-dev/dsec/internal/frontend/dashboard"
	"github.com/dsec-dev/dsec/internal/frontend/sandboxfusion"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Handler is everything the main listener serves: dsec's /v1 API, the other
// front ends' routes (SandboxFusion's /run_code, /submit and /run_jupyter) and GET /metrics,
// with the same bearer token as /v1, and the dashboard at /ui/.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	rates := dashboard.NewRates(0, 0)
	mux.Handle(dashboard.Prefix, dashboard.New(dashboard.Options{Token: d.Token, Service: d.obs.svc, Rates: rates,
		Usage: d.Manager.SandboxUsage, Pools: d.fnCallPools, Logger: d.cfg.Logger}))
	tok := httpkit.Token(d.Token)
	sf := tok.With(writeUnauthorized).Wrap(d.sandboxFusion())
	for _, p := range sandboxfusion.Routes() {
		mux.Handle(p, sf)
	}
	mux.Handle("GET "+MetricsPath, tok.Wrap(d.obs.metrics.Handler()))
	mux.Handle("/", d.Server.Handler())
	return rates.Count(mux)
}

func (d *Daemon) sandboxFusion() *sandboxfusion.Handler {
	// Through the metrics decorator, so its FnCalls are counted like /v1's.
	return sandboxfusion.New(d.obs.svc, sandboxfusion.Options{Logger: d.cfg.Logger, Sandboxes: d.obs.svc})
}

// writeUnauthorized answers as SandboxFusion does.
func writeUnauthorized(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"detail":"missing or invalid bearer token","code":"` + api.CodeUnauthorized + `"}`))
}

// ServeSandboxFusion serves SandboxFusion's API on l WITHOUT a token, for
// SandboxFusion clients (which send none) on a trusted network, until Shutdown.
func (d *Daemon) ServeSandboxFusion(l net.Listener) error { return d.serveOn(l, d.sandboxFusion()) }

// fnCallPools reports the FnCall engine's pools for the dashboard.
func (d *Daemon) fnCallPools() []dashboard.Pool {
	if d.FnCall == nil {
		return nil
	}
	var out []dashboard.Pool
	for _, p := range d.FnCall.Pools() {
		out = append(out, dashboard.Pool{Image: p.Image, Slots: p.Slots, Busy: p.Busy})
	}
	return out
}
