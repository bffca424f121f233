package v1

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/codeint"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/session"
)

// Default limits.
const (
	DefaultMaxBodyBytes   = 1 << 20 // JSON request bodies
	DefaultMaxUploadBytes = 1 << 30 // file and tar uploads
)

// Options configures a Server.
type Options struct {
	// Token is the bearer token every route but GET /v1/health requires. An empty
	// token rejects every authenticated request (fail closed).
	Token string
	// Authorize, when set, decides instead of Token which bearer tokens are
	// accepted (a cluster's API servers share their tokens through etcd).
	Authorize func(token string) bool
	// Projects, when set, names each token's project instead of Token and
	// Authorize and scopes every /v1/sandboxes/{id} route and trajectory ID to
	// the caller's project (project.Guard, which the service passed to New
	// wraps: it serves /v1/projects).
	Projects ProjectAuth
	// Logger receives request logs (debug level) and panics; nil discards them.
	Logger *slog.Logger
	// MaxBodyBytes limits JSON request bodies (and each line of exec/stream);
	// 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxUploadBytes limits file and tar uploads; 0 means DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// KeepAlive is how long a blocking exec or process wait stays silent before
	// its answer starts and whitespace follows at this interval (answerLate); 0
	// means DefaultKeepAlive, negative never.
	KeepAlive time.Duration
	// Steps says the service passed to New logs tagged steps itself (its chain
	// has trajectory.Interceptor): the server accepts them and serves the
	// trajectory API from the service. Without Steps or StepsDownstream a
	// trajectory-tagged request is not_implemented.
	Steps bool
	// StepsDownstream says the service passed to New forwards trajectory step
	// tags to the nodes that log them (a cluster's router): the server accepts
	// tagged steps and serves the trajectory API from the service.
	StepsDownstream bool
}

// Server is the /v1 HTTP API in front of a session service: it maps routes to
// session calls and errors to statuses, and adds auth, limits and logging.
type Server struct {
	svc   session.Service
	opts  Options
	log   *slog.Logger
	mux   *http.ServeMux
	proxy *sandboxProxy
	code  *codeint.Client // code:run
	steps bool            // Options.Steps
	// trajAPI serves the trajectory API and tagged steps: svc when it logs
	// steps (Steps or StepsDownstream), else nil.
	trajAPI session.Trajectories
	handler http.Handler
}

// New returns a Server serving svc.
func New(svc session.Service, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxUploadBytes <= 0 {
		opts.MaxUploadBytes = DefaultMaxUploadBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{svc: svc, opts: opts, log: log, mux: http.NewServeMux(), steps: opts.Steps}
	if opts.Steps || opts.StepsDownstream {
		s.trajAPI = svc
	}
	if opts.Projects != nil && s.trajAPI != nil {
		s.trajAPI = project.Trajectories{API: s.trajAPI} // each project its own trajectory IDs
	}
	s.proxy = newSandboxProxy(svc, log, s.proxyError)
	s.code = codeint.NewClient(svc)
	for _, rt := range s.routes() {
		s.mux.HandleFunc(rt.pattern, rt.handler)
	}
	s.handler = s.logRequests(s.recoverPanics(s.authenticate(http.HandlerFunc(s.dispatch))))
	return s
}

// Handler returns the http.Handler serving the API.
func (s *Server) Handler() http.Handler { return s.handler }
