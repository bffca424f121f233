package e2b

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/frontend/e2b/buildstate"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process/processconnect"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Headers E2B's SDKs send.
const (
	SandboxIDHeader    = "E2b-Sandbox-Id"
	SandboxPortHeader  = "E2b-Sandbox-Port"
	APIKeyHeader       = "X-API-Key"
	AccessTokenHeader  = "X-Access-Token"
	TrafficTokenHeader = "E2b-Traffic-Access-Token"
	NextTokenHeader    = "X-Next-Token"
	keepaliveHeader    = "Keepalive-Ping-Interval"
)

// EnvdVersion is the envd version dsec reports: the highest of the SDK's feature
// gates it implements (file metadata 0.6.2, entries in watch events 0.6.3,
// watching with allowNetworkMounts 0.6.4).
const EnvdVersion = "0.6.4"

// Defaults.
const (
	DefaultMaxUploadBytes  = 1 << 30
	DefaultMaxMessageBytes = 16 << 20
	DefaultWatchInterval   = 200 * time.Millisecond
	maxBodyBytes           = 1 << 20
)

// Options configures a Handler.
type Options struct {
	// Authorize says whether token (the API key without an "e2b_" prefix, or a
	// bearer token) is a valid dsec token. Nil refuses every request.
	Authorize func(token string) bool
	// Secret keys the per-sandbox envd access tokens. Empty means a random key,
	// so tokens handed out before a restart stop working (reconnecting gets a
	// new one). The daemon passes its API token.
	Secret []byte
	// Logger receives errors and panics; nil discards them.
	Logger *slog.Logger
	// MaxUploadBytes limits one file written through POST /files.
	MaxUploadBytes int64
	// MaxMessageBytes limits one Connect request message.
	MaxMessageBytes int
	// WatchInterval is how often a WatchDir stream polls.
	WatchInterval time.Duration
	// Domain is the sandbox domain: getHost(port) in E2B's SDKs gives
	// "PORT-SANDBOXID.DOMAIN", which must reach this handler (wildcard DNS, or
	// names under localhost). It may end in ":PORT". Empty: DomainFor the
	// listener's address (SetListenAddr), "localhost" until then.
	Domain string
	// Builds keeps the state of template builds (buildstate). Nil: this
	// process's memory (buildstate.Memory), for a front end that is its
	// node's only one.
	Builds buildstate.Store
}

// Handler serves the E2B API over a session.Service.
type Handler struct {
	svc     session.Service
	opts    Options
	log     *slog.Logger
	control *http.ServeMux
	envd    *http.ServeMux
	ports   *httputil.ReverseProxy // to sandbox ports (ports.go)
	domain  atomic.Pointer[string] // the sandbox domain (Domain)
	// services are what create starts in a template's sandboxes (codeint.go).
	services map[string]templateService
	tpl      *templateBuilds // template builds (templates.go)
	// templates caches the image list templates resolve against (template_backend.go).
	templates imageList

	mu      sync.Mutex
	hasBash map[string]bool               // by sandbox: whether /bin/bash exists (see shell)
	passwd  map[string]map[string]account // by sandbox: its accounts (see accounts)
	groups  map[string]map[int]string     // by sandbox: its groups' names (see names)
	// workdirs (by sandbox) and imageDirs (by image) are the WorkingDir of
	// a sandbox's image (see workdir).
	workdirs  map[string]string
	imageDirs map[string]imageDir
}

// New returns a Handler serving svc.
func New(svc session.Service, opts Options) *Handler {
	if opts.MaxUploadBytes <= 0 {
		opts.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = DefaultWatchInterval
	}
	if len(opts.Secret) == 0 {
		opts.Secret = make([]byte, 32)
		_, _ = rand.Read(opts.Secret)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Builds == nil {
		opts.Builds = buildstate.NewMemory()
	}
	h := &Handler{svc: svc, opts: opts, log: log, control: http.NewServeMux(), envd: http.NewServeMux(), hasBash: map[string]bool{}, passwd: map[string]map[string]account{}, groups: map[string]map[int]string{}, workdirs: map[string]string{}, imageDirs: map[string]imageDir{}}
	domain := cmp.Or(opts.Domain, "localhost")
	h.domain.Store(&domain)
	h.ports = h.newPortProxy()
	h.services = templateServices()
	h.tpl = newTemplateBuilds(opts.Builds)
	for _, rt := range slices.Concat(h.controlRoutes(), h.snapshotRoutes(), h.templateRoutes(), h.tagRoutes()) {
		h.control.HandleFunc(rt.pattern, rt.handler)
	}
	copts := []connect.HandlerOption{connect.WithReadMaxBytes(opts.MaxMessageBytes)}
	h.envd.Handle(processconnect.NewProcessHandler(&processService{h: h}, copts...))
	h.envd.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{h: h}, copts...))
	h.envd.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h.envd.HandleFunc("GET /files", h.readFile)
	h.envd.HandleFunc("POST /files", h.writeFiles)
	return h
}

// Close releases the handler; it holds nothing of the sandboxes (their
// processes, deadlines and watches are their nodes'), only the template
// builds it runs (each ends as an error) and its build store.
func (h *Handler) Close() error {
	return h.tpl.close()
}

// envd route prefixes (served only with the E2b-Sandbox-Id header).
var envdPaths = []string{"/health", "/files", "/" + processconnect.ProcessName + "/", "/" + filesystemconnect.FilesystemName + "/"}

// control-plane route prefixes.
var controlPaths = []string{"/sandboxes", "/v2/sandboxes", "/templates", "/v2/templates", "/v3/templates", "/snapshots", "/teams", "/volumes", "/health"}

// ownedPaths are all the prefixes Owns claims.
var ownedPaths = slices.Concat(controlPaths, envdPaths)

func hasPathPrefix(p, prefix string) bool {
	return p == prefix || strings.HasPrefix(p, strings.TrimSuffix(prefix, "/")+"/")
}

// Owns says whether r is an E2B request: every request carrying E2b-Sandbox-Id
// or naming a sandbox port by its host, and the control plane's and envd's
// paths.
func (h *Handler) Owns(r *http.Request) bool {
	if r.Header.Get(SandboxIDHeader) != "" {
		return true
	}
	if _, ok, _ := h.hostTarget(r.Host); ok {
		return true
	}
	for _, p := range ownedPaths {
		if hasPathPrefix(r.URL.Path, p) {
			return true
		}
	}
	return false
}

// Mount serves E2B requests (see Owns) with e and everything else with next.
func Mount(next http.Handler, e *Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.Owns(r) {
			e.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer h.recoverPanic(w, r)
	ctx, outcome, err := withStep(r)
	if err != nil {
		h.envdError(w, r, connect.CodeInvalidArgument, http.StatusBadRequest, err.Error())
		return
	}
	if outcome != nil {
		w = &replayWriter{ResponseWriter: w, out: outcome}
	}
	r = r.WithContext(ctx)
	if t, ok, err := h.portOf(r); ok {
		switch {
		case err != nil:
			h.writeErr(w, r, err)
			return
		case t.port != EnvdPort:
			h.servePort(w, r, t)
			return
		}
		r.Header.Set(SandboxIDHeader, t.id) // envd by its host
	}
	if h.isEnvd(r) {
		h.serveEnvd(w, r)
		return
	}
	h.serveControl(w, r)
}

func (h *Handler) isEnvd(r *http.Request) bool {
	if r.Header.Get(SandboxIDHeader) != "" {
		return true
	}
	for _, p := range envdPaths {
		if p != "/health" && hasPathPrefix(r.URL.Path, p) {
			return true
		}
	}
	return false
}

func isConnectPath(p string) bool {
	return strings.HasPrefix(p, "/"+processconnect.ProcessName+"/") || strings.HasPrefix(p, "/"+filesystemconnect.FilesystemName+"/")
}

func (h *Handler) recoverPanic(w http.ResponseWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
		panic(v)
	}
	h.log.ErrorContext(r.Context(), "panic in e2b handler", "method", r.Method, "path", r.URL.Path,
		"panic", v, "stack", string(debug.Stack()))
	h.writeAPIError(w, r, http.StatusInternalServerError, "internal error")
}

// apiKey returns the token a control-plane request carries.
func apiKey(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get(APIKeyHeader)); k != "" {
		return k
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(tok)
	}
	return ""
}

// authorized accepts the key as it is or without E2B's "e2b_" prefix (SDKs
// before 1.0 refuse keys without it).
func (h *Handler) authorized(r *http.Request) bool {
	k := apiKey(r)
	if k == "" || h.opts.Authorize == nil {
		return false
	}
	if h.opts.Authorize(k) {
		return true
	}
	bare, ok := strings.CutPrefix(k, "e2b_")
	return ok && bare != "" && h.opts.Authorize(bare)
}

// accessToken is the envd access token of sandbox id.
func (h *Handler) accessToken(id string) string { return h.token("dsec-e2b-envd", id) }

// trafficToken is the token a request to a port of sandbox id carries when
// the sandbox's ports are private (network.allowPublicTraffic false).
func (h *Handler) trafficToken(id string) string { return h.token("dsec-e2b-traffic", id) }

// token is an HMAC of sandbox id for one purpose: no state is needed to check it.
func (h *Handler) token(purpose, id string) string {
	m := hmac.New(sha256.New, h.opts.Secret)
	m.Write([]byte(purpose + "\x00" + id))
	return hex.EncodeToString(m.Sum(nil))
}

// envdAuthorized accepts the sandbox's access token or an API key.
func (h *Handler) envdAuthorized(r *http.Request, id string) bool {
	if t := r.Header.Get(AccessTokenHeader); t != "" {
		return subtle.ConstantTimeCompare([]byte(t), []byte(h.accessToken(id))) == 1
	}
	return h.authorized(r)
}

// serveEnvd checks the sandbox header, the access token and that the sandbox
// runs, then serves the envd route.
func (h *Handler) serveEnvd(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(SandboxIDHeader)
	signed := isSigned(r)
	if signed {
		// A signed file URL is its own credential and names its sandbox.
		sid, err := h.signedSandbox(r.Context(), r)
		if err != nil {
			h.writeAPIError(w, r, httpStatus(err), err.Error())
			return
		}
		id = sid
		r.Header.Set(SandboxIDHeader, id)
	}
	switch {
	case id == "":
		h.envdError(w, r, connect.CodeInvalidArgument, http.StatusBadRequest, "missing "+SandboxIDHeader+" header")
	case !signed && !h.envdAuthorized(r, id):
		h.envdError(w, r, connect.CodeUnauthenticated, http.StatusUnauthorized, "missing or invalid access token ("+AccessTokenHeader+")")
	case !h.ensureRunning(r.Context(), id) && !tagged(r.Context()):
		// A trajectory step goes on to the session service, whose log may
		// answer it even though the sandbox is gone.
		writeSandboxGone(w, id)
	default:
		if _, pattern := h.envd.Handler(r); pattern == "" {
			h.envdError(w, r, connect.CodeNotFound, http.StatusNotFound, "no route for "+r.Method+" "+r.URL.Path)
			return
		}
		if isServerStream(r.URL.Path) {
			bw := newBatchWriter(w)
			defer bw.finish()
			w = bw
		}
		h.envd.ServeHTTP(w, r)
	}
}

// isServerStream says whether p is one of envd's server-streaming RPCs.
func isServerStream(p string) bool {
	switch p {
	case processconnect.ProcessStartProcedure, processconnect.ProcessConnectProcedure, filesystemconnect.FilesystemWatchDirProcedure:
		return true
	}
	return false
}

// envdError answers an envd request that never reached its handler: a Connect
// error on the RPC paths, {code, message} on the others.
func (h *Handler) envdError(w http.ResponseWriter, r *http.Request, code connect.Code, status int, msg string) {
	if isConnectPath(r.URL.Path) {
		writeConnectError(w, code, msg)
		return
	}
	h.writeAPIError(w, r, status, msg)
}

// ensureRunning says whether sandbox id runs, resuming it first when it is
// paused and was created with auto-resume.
func (h *Handler) ensureRunning(ctx context.Context, id string) bool {
	_, ok := h.running(ctx, id)
	return ok
}

// running returns sandbox id when it runs (see ensureRunning).
func (h *Handler) running(ctx context.Context, id string) (api.Sandbox, bool) {
	ctx = session.WithoutStep(ctx)
	sb, err := h.svc.Get(ctx, id)
	if err != nil {
		return sb, false
	}
	if sb.State == api.StatePaused && sb.Labels[labelAutoResume] == "true" {
		if sb, err = h.svc.Resume(ctx, id); err == nil {
			if t := resumedTimeout(sb); t > 0 {
				err = h.setDeadline(ctx, sb, t, true)
			}
		}
	}
	return sb, err == nil && sb.State == api.StateRunning
}

func tagged(ctx context.Context) bool {
	_, _, ok := session.StepFrom(ctx)
	return ok
}

// forget drops what the front end keeps for a sandbox that ended.
func (h *Handler) forget(id string) {
	h.mu.Lock()
	delete(h.hasBash, id)
	delete(h.passwd, id)
	delete(h.groups, id)
	delete(h.workdirs, id)
	h.mu.Unlock()
}
