// Package dashboard serves dsec's web dashboard: the embedded front end (ui/dist) at
// /ui/, one JSON call that drives the overview (/ui/api/overview: nodes with
// capacity and load, sandboxes by state and backend, create and error rates) and
// per-sandbox CPU and memory use (/ui/api/usage for a page of sandboxes,
// /ui/api/top for the busiest, which `dsec top` shows) and a WebSocket terminal
// into a sandbox (/ui/api/terminal/{id}) bridged to the session service's
// streaming exec with a TTY. The lists (sandboxes, images,
// trajectories) come from /v1 directly. It is an http.Handler any component
// mounts: `dsec server` does, an API server in a cluster passes its own Nodes.
//
// Static assets need no token (they hold no data); every /ui/api/ call needs the
// same bearer token as /v1 (the terminal reads it from its first message,
// browsers cannot set headers on a WebSocket).
package dashboard

import (
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
	webui "github.com/dsec-dev/dsec/ui"
)

// Prefix is where the dashboard is mounted.
const Prefix = "/ui/"

// Options configures a Handler.
type Options struct {
	// Token is the API bearer token; empty refuses every API call (fail closed).
	Token string
	// Authorize, when set, decides instead of Token which bearer tokens are
	// accepted (a cluster's API servers share their tokens through etcd).
	Authorize func(token string) bool
	// Service lists sandboxes for the overview and runs terminals.
	Service session.Service
	// Nodes gives the nodes' capacity and load; nil: one node, this one
	// (LocalNodes over Service).
	Nodes NodeSource
	// Rates is the create/error history; nil: the overview has none.
	Rates *Rates
	// Usage reads sandboxes' CPU and memory use (/ui/api/usage, /ui/api/top);
	// nil: Service's (which may answer not_implemented).
	Usage UsageFunc
	// Pools reports FnCall pools; nil: none.
	Pools func() []Pool
	// Shell is what a terminal runs (/bin/sh -c); default TerminalShell.
	Shell string
	// Assets overrides the embedded front end (tests).
	Assets fs.FS
	Logger *slog.Logger
}

// Handler serves the dashboard under Prefix.
type Handler struct {
	opts Options
	tok  func(token string) bool
	log  *slog.Logger
	mux  *http.ServeMux
	cpu  cpuSampler
}

// New returns the dashboard handler.
func New(opts Options) *Handler {
	if opts.Nodes == nil {
		opts.Nodes = LocalNodes{Service: opts.Service}
	}
	if opts.Usage == nil && opts.Service != nil {
		opts.Usage = opts.Service.SandboxUsage
	}
	if opts.Shell == "" {
		opts.Shell = TerminalShell
	}
	if opts.Assets == nil {
		opts.Assets = webui.Dist()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tok := opts.Authorize
	if tok == nil {
		tok = auth.NewToken(opts.Token).Match
	}
	h := &Handler{opts: opts, tok: tok, log: log, mux: http.NewServeMux()}
	static := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(opts.Assets))
	h.mux.Handle("GET "+Prefix+"{$}", noCache(static))
	h.mux.Handle("GET "+Prefix+"assets/", immutable(static))
	h.mux.Handle("GET "+Prefix+"favicon.svg", static)
	h.mux.Handle("GET "+Prefix+"api/overview", h.bearer(http.HandlerFunc(h.overview)))
	h.mux.Handle("GET "+Prefix+"api/usage", h.bearer(http.HandlerFunc(h.usage)))
	h.mux.Handle("GET "+Prefix+"api/top", h.bearer(http.HandlerFunc(h.top)))
	h.mux.HandleFunc("GET "+Prefix+"api/terminal/{id}", h.terminal)
	h.mux.Handle(Prefix+"api/", h.bearer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.NotFound("no dashboard API route %s %s", r.Method, r.URL.Path))
	})))
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// bearer refuses a request without the token, as /v1 does (httpkit.BearerAuth).
func (h *Handler) bearer(next http.Handler) http.Handler { return httpkit.Match(h.tok).Wrap(next) }

func noCache(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}

// immutable: vite names assets by content hash.
func immutable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encoding the answer"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers with /v1's error body for err's code.
func writeError(w http.ResponseWriter, err error) {
	e := errdefs.ToAPI(err)
	writeJSON(w, api.StatusOf(e.Code), api.ErrorBody{Error: e})
}
