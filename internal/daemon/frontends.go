package daemon

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/frontend/sandboxfusion"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/ui"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Handler is everything the main listener serves: dsec's /v1 API, the other
// front ends' routes (SandboxFusion's /run_code and /submit) and GET /metrics,
// with the same bearer token as /v1, and the dashboard at /ui/.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	rates := ui.NewRates(0, 0)
	mux.Handle(ui.Prefix, ui.New(ui.Options{Token: d.Token, Service: d.obs.svc, Rates: rates,
		Usage: d.Manager.SandboxUsage, Pools: d.fnCallPools, Logger: d.cfg.Logger}))
	sf := d.guard(d.sandboxFusion(), writeUnauthorized)
	for _, p := range sandboxfusion.Routes() {
		mux.Handle(p, sf)
	}
	mux.Handle("GET "+MetricsPath, d.guard(d.obs.metrics.Handler(), writeAPIUnauthorized))
	mux.Handle("/", d.Server.Handler())
	return rates.Count(mux)
}

// guard requires the API token before h; deny answers a request without it.
func (d *Daemon) guard(h http.Handler, deny func(http.ResponseWriter)) http.Handler {
	tok := auth.NewToken(d.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tok.MatchBearer(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dsec"`)
			deny(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (d *Daemon) sandboxFusion() *sandboxfusion.Handler {
	// Through the metrics decorator, so its FnCalls are counted like /v1's.
	return sandboxfusion.New(d.obs.svc, sandboxfusion.Options{Logger: d.cfg.Logger})
}

func writeUnauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"detail":"missing or invalid bearer token","code":"` + api.CodeUnauthorized + `"}`))
}

// writeAPIUnauthorized answers as /v1 does (api.ErrorBody).
func writeAPIUnauthorized(w http.ResponseWriter) {
	e := api.NewError(api.CodeUnauthorized, "missing or invalid bearer token")
	b, _ := json.Marshal(api.ErrorBody{Error: e})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(metrics.ErrorHeader, string(e.Code))
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(b, '\n'))
}

// ServeSandboxFusion serves SandboxFusion's API on l WITHOUT a token, for
// SandboxFusion clients (which send none) on a trusted network, until Shutdown.
func (d *Daemon) ServeSandboxFusion(l net.Listener) error {
	srv := &http.Server{Handler: d.sandboxFusion(), ReadHeaderTimeout: 30 * time.Second}
	d.mu.Lock()
	d.extra = append(d.extra, srv)
	d.mu.Unlock()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// fnCallPools reports the FnCall engine's pools for the dashboard.
func (d *Daemon) fnCallPools() []ui.Pool {
	if d.FnCall == nil {
		return nil
	}
	var out []ui.Pool
	for _, p := range d.FnCall.Pools() {
		out = append(out, ui.Pool{Image: p.Image, Slots: p.Slots, Busy: p.Busy})
	}
	return out
}
