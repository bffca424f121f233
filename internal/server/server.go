package server

import (
	"log/slog"
	"net/http"

	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
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
	// Authorize, scopes every /v1/sandboxes/{id} route to the caller's project
	// and serves /v1/projects (project.Guard).
	Projects ProjectAdmin
	// Logger receives request logs (debug level) and panics; nil discards them.
	Logger *slog.Logger
	// MaxBodyBytes limits JSON request bodies (and each line of exec/stream);
	// 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxUploadBytes limits file and tar uploads; 0 means DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// Trajectories is the trajectory decorator the service passed to New is
	// wrapped in (trajectory.Wrap; New serves through it): the trajectory API and
	// tagged steps. nil refuses trajectory-tagged requests (not_implemented).
	Trajectories *trajectory.Service
	// TrajectoryAPI serves the trajectory API and accepts tagged steps when
	// there is no Trajectories: the service passed to New forwards the step
	// tag (a cluster's router, whose nodes log the steps).
	TrajectoryAPI trajectory.API
	// StepHTTP runs trajectory-tagged sandbox HTTP proxy requests when there is
	// no Trajectories (a cluster's router: the sandbox's node logs the step);
	// nil answers them not_implemented.
	StepHTTP session.HTTPDoer
	// Images describes images and environments (GET /v1/images...); nil answers
	// not_implemented.
	Images ImageLister
	// ImageManager composes, removes and records environments; nil answers
	// not_implemented.
	ImageManager ImageManager
	// FnCall serves POST /v1/fncall and /v1/fncall/batch when there is no
	// Trajectories (the decorator runs FnCalls then: trajectory.Options.FnCall);
	// nil answers not_implemented.
	FnCall session.FnCaller
	// QoS serves pause with reclaim and PUT .../cpu-class; nil: the service
	// itself if it implements session.QoS, else not_implemented.
	QoS session.QoS
}

// Server is the /v1 HTTP API in front of a session service: it maps routes to
// session calls and errors to statuses, and adds auth, limits and logging.
type Server struct {
	svc     session.Service
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	proxy   *sandboxProxy
	traj    *trajectory.Service
	trajAPI trajectory.API // traj, else Options.TrajectoryAPI
	// stepHTTP runs tagged proxy steps: traj, else Options.StepHTTP (nil: none).
	stepHTTP session.HTTPDoer
	handler  http.Handler
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
	if opts.Trajectories != nil {
		svc = opts.Trajectories
	}
	s := &Server{svc: svc, opts: opts, log: log, mux: http.NewServeMux(), traj: opts.Trajectories, trajAPI: opts.TrajectoryAPI}
	if opts.Trajectories != nil {
		s.trajAPI = opts.Trajectories
		s.stepHTTP = opts.Trajectories
	} else if opts.StepHTTP != nil && opts.TrajectoryAPI != nil {
		s.stepHTTP = opts.StepHTTP
	}
	if opts.Projects != nil && s.trajAPI != nil {
		s.trajAPI = project.Trajectories{API: s.trajAPI} // each project its own trajectory IDs
	}
	s.proxy = newSandboxProxy(svc, log, s.proxyError)
	for _, rt := range s.routes() {
		s.mux.HandleFunc(rt.pattern, rt.handler)
	}
	s.handler = s.logRequests(s.recoverPanics(s.authenticate(http.HandlerFunc(s.dispatch))))
	return s
}

// Handler returns the http.Handler serving the API.
func (s *Server) Handler() http.Handler { return s.handler }
