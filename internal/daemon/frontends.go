package daemon

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/frontend/sandboxfusion"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Handler is everything the main listener serves: dsec's /v1 API, the other
// front ends' routes (SandboxFusion's /run_code and /submit) and GET /metrics,
// with the same bearer token as /v1.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	sf := d.guard(d.sandboxFusion())
	for _, p := range sandboxfusion.Routes() {
		mux.Handle(p, sf)
	}
	mux.Handle("GET "+MetricsPath, d.guard(d.obs.metrics.Handler()))
	mux.Handle("/", d.Server.Handler())
	return mux
}

// guard requires the API token before h.
func (d *Daemon) guard(h http.Handler) http.Handler {
	tok := auth.NewToken(d.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tok.MatchBearer(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dsec"`)
			writeUnauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (d *Daemon) sandboxFusion() *sandboxfusion.Handler {
	return sandboxfusion.New(d.FnCall, sandboxfusion.Options{Logger: d.cfg.Logger})
}

func writeUnauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"detail":"missing or invalid bearer token","code":"` + api.CodeUnauthorized + `"}`))
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
