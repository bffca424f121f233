package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/cluster/router"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/buildstate"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Config configures an API server.
type Config struct {
	// Etcd is the cluster state store (cluster.Connect).
	Etcd   *clientv3.Client
	Prefix string // default cluster.DefaultPrefix
	// Secret is the cluster secret (noderpc.LoadSecret).
	Secret []byte
	// DataDir holds DATA_DIR/token when this API server creates the cluster's
	// first token.
	DataDir string
	// BlobStore is the cluster's shared blob store (blob.ParseSpec: s3://... or
	// dir:PATH on a mount every node shares): compose checks layers there and
	// records it in the manifest. Empty: layers are not checked, and nodes
	// read them from their own --blob-store.
	BlobStore string
	// Placement tunes the engine (K, MaxReplacements, RefreshInterval ...).
	Placement placement.Config
	// Name identifies this API server in logs and token records.
	Name string
	// E2BDomain is the sandbox domain of E2B's API (e2b.Options.Domain;
	// empty: "localhost:PORT" of the API listener).
	E2BDomain string
	// OTLPEndpoint exports traces (tracing.Config.Endpoint; empty: the OTEL_*
	// environment, else off). Tracing, when set, is used instead (tests).
	OTLPEndpoint string
	Tracing      *tracing.Provider
	Logger       *slog.Logger
	// QuotaReconcile is how often quota reservations are reconciled with the
	// nodes' sandboxes (project.Guard.Reconcile; default 30 s). Rounds run
	// only while some project has a quota.
	QuotaReconcile time.Duration
	// ElectionTTL bounds how long the quota reconciler has no leader after
	// the API server running it dies (default cluster.DefaultElectionTTL).
	ElectionTTL time.Duration
}

// APIServer is one running API server.
type APIServer struct {
	Router  *router.Router
	Engine  *placement.Engine
	Watcher *cluster.Watcher
	Tokens  *cluster.Tokens
	// Projects enforces projects and quotas over the router.
	Projects *project.Guard
	Server   *v1.Server
	// E2B serves E2B's API over the router (Handler mounts it).
	E2B *e2b.Handler
	// Metrics is this API server's registry (GET /metrics).
	Metrics *metrics.Metrics
	// TokenFile is DATA_DIR/token (written only by the cluster's first API server).
	TokenFile string
	svc       session.Service
	tracing   *tracing.Provider
	log       *slog.Logger
	http      *http.Server
	stack     *lifecycle.Stack
	mu        sync.Mutex
	extra     []*http.Server // ServeMetrics
	// Set by the start-up steps for the steps after them.
	cfg      Config
	secret   cluster.Secret
	bg       context.Context // the background work's, canceled at Shutdown
	projects project.Store
	fnEng    *placement.Engine
	envs     *envstore.Store
	blobs    blob.Store // the cluster's blob store (nil: none)
	cl       *metrics.Cluster
	base     router.Cluster // the router with the cluster's environments: every front end's base service
}

// New starts an API server's background work (watches, placement refresh)
// until Shutdown. A failure at any step releases what the steps before it
// started.
func New(ctx context.Context, cfg Config) (*APIServer, error) {
	a, steps, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	if err := a.Start(ctx, steps, ""); err != nil {
		return nil, err
	}
	return a, nil
}

// Open checks cfg and returns the API server and the steps that start it
// (Start runs them), for a role that starts its own steps around them.
func Open(cfg Config) (*APIServer, []lifecycle.Step, error) {
	if cfg.Etcd == nil || len(cfg.Secret) == 0 || cfg.DataDir == "" {
		return nil, nil, errors.New("apiserver: Etcd, Secret and DataDir are required")
	}
	if cfg.E2BDomain != "" {
		if err := e2b.CheckDomain(cfg.E2BDomain); err != nil {
			return nil, nil, fmt.Errorf("--e2b-domain: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = slog.New(tracing.LogHandler(cfg.Logger.Handler())) // request IDs in every line
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = "apiserver@" + host
	}
	if cfg.Placement.RefreshInterval == 0 {
		cfg.Placement.RefreshInterval = 500 * time.Millisecond
	}
	cfg.Placement.Logger = cfg.Logger
	if cfg.QuotaReconcile <= 0 {
		cfg.QuotaReconcile = 30 * time.Second
	}
	a := &APIServer{cfg: cfg, log: cfg.Logger, TokenFile: filepath.Join(cfg.DataDir, "token")}
	return a, a.steps(), nil
}

// Start runs steps (Open's, with a role's around them); failAfter injects a
// failure after the step of that name (tests). Shutdown releases them.
func (a *APIServer) Start(ctx context.Context, steps []lifecycle.Step, failAfter string) error {
	st, err := lifecycle.Start(ctx, steps, lifecycle.Options{FailAfter: failAfter, Logger: a.log})
	if err != nil {
		return err
	}
	a.stack = st
	return nil
}

// StepNames names the API server's start-up steps, in order.
func StepNames() []string { return lifecycle.Names((&APIServer{}).steps()) }

// steps is the API server's start-up, in order; each step's Close releases
// what it started.
func (a *APIServer) steps() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "cluster-secret", Start: a.startSecret},
		{Name: "background", Start: a.startBackground},
		{Name: "watcher", Start: a.startWatcher},
		{Name: "tokens", Start: a.startTokens},
		{Name: "placement", Start: a.startPlacement},
		{Name: "environments", Start: a.startEnvironments},
		{Name: "tracing", Start: a.startTracing},
		{Name: "router", Start: a.startRouter},
		{Name: "quota-reconciler", Start: a.startQuotaReconciler},
		{Name: "front-ends", Start: a.startFrontEnds},
	}
}

func (a *APIServer) startSecret(ctx context.Context) (lifecycle.Close, error) {
	secret, err := cluster.NewSecret(string(a.cfg.Secret))
	if err != nil {
		return nil, err
	}
	a.secret = secret
	if err := cluster.CheckSecret(ctx, a.cfg.Etcd, a.cfg.Prefix, secret); err != nil {
		return nil, err
	}
	if err := cluster.CheckFormat(ctx, a.cfg.Etcd, a.cfg.Prefix); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(a.cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	return nil, nil
}

// startBackground makes the context of the background work (watches,
// placement refresh, the election); its Close ends them.
func (a *APIServer) startBackground(ctx context.Context) (lifecycle.Close, error) {
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.bg = bg
	return func(context.Context) error { cancel(); return nil }, nil
}

func (a *APIServer) startWatcher(context.Context) (lifecycle.Close, error) {
	w, err := cluster.NewWatcher(a.bg, cluster.WatcherConfig{Client: a.cfg.Etcd, Prefix: a.cfg.Prefix, Secret: a.secret, Logger: a.log})
	if err != nil {
		return nil, err
	}
	a.Watcher = w
	m, cl, err := newMetrics(w)
	a.Metrics, a.cl = m, cl
	return nil, err
}

func (a *APIServer) startTokens(context.Context) (lifecycle.Close, error) {
	toks, err := cluster.OpenTokens(a.bg, a.cfg.Etcd, a.cfg.Prefix, a.TokenFile, a.cfg.Name, a.log)
	if err != nil {
		return nil, err
	}
	a.Tokens = toks
	a.projects, err = cluster.OpenProjects(a.bg, a.cfg.Etcd, a.cfg.Prefix, toks, a.log)
	return nil, err
}

func (a *APIServer) startPlacement(context.Context) (lifecycle.Close, error) {
	a.Engine = placement.New(a.Watcher, a.cfg.Placement)
	if err := a.Engine.Refresh(a.bg); err != nil {
		return nil, err
	}
	if err := a.cl.PlacementSnapshots(func() int64 { return a.Engine.Stats().Refreshes }); err != nil {
		return nil, err
	}
	go a.Engine.Watch(a.bg)
	a.fnEng = placement.New(router.FnCallSource{Nodes: a.Watcher}, a.cfg.Placement)
	if err := a.fnEng.Refresh(a.bg); err != nil {
		return nil, err
	}
	go a.fnEng.Watch(a.bg)
	return nil, nil
}

func (a *APIServer) startEnvironments(context.Context) (lifecycle.Close, error) {
	var blobs blob.Store
	if a.cfg.BlobStore != "" {
		var err error
		if blobs, err = blob.Open(a.cfg.BlobStore, false); err != nil {
			return nil, fmt.Errorf("--blob-store: %w", err)
		}
	}
	a.blobs = blobs
	a.envs = envstore.New(envstore.NewEtcdState(a.cfg.Etcd, a.cfg.Prefix), blobs)
	a.envs.Spec = a.cfg.BlobStore
	return nil, nil
}

func (a *APIServer) startTracing(context.Context) (lifecycle.Close, error) {
	tp := a.cfg.Tracing
	if tp == nil {
		var err error
		if tp, err = tracing.New(a.bg, tracing.Config{Endpoint: a.cfg.OTLPEndpoint, ServiceName: "dsec-apiserver"}); err != nil {
			return nil, err
		}
	}
	a.tracing = tp
	return tp.Shutdown, nil
}

func (a *APIServer) startRouter(context.Context) (lifecycle.Close, error) {
	cfg := a.cfg
	a.Router = router.New(router.Config{
		Nodes: a.Watcher, Engine: a.Engine, FnCalls: a.fnEng, Logger: a.log, Observer: a.cl, Tracer: a.tracing,
		EnvLayers: (&router.LayerCache{Store: a.envs}).Layers,
		Claims:    cluster.NewRequests(cfg.Etcd, cfg.Prefix),
		Drainer:   nodeAdmin{Admin: cluster.Admin{Client: cfg.Etcd, Prefix: cfg.Prefix}, marks: envstore.NewEtcdState(cfg.Etcd, cfg.Prefix)},
		Dial: func(n cluster.NodeStatus) session.Service {
			return noderpc.NewClient(n.Addr, noderpc.ClientOptions{Secret: cfg.Secret, Tracer: a.tracing})
		},
	})
	a.base = router.Cluster{Router: a.Router, Envs: &router.Images{Store: a.envs, Router: a.Router}}
	a.Projects = project.NewGuard(a.base, a.projects, a.log)
	return func(context.Context) error { return a.Router.Close() }, nil
}

// startQuotaReconciler: one API server at a time reconciles quotas (etcd's
// election recipe); another takes over within the election TTL when it dies.
func (a *APIServer) startQuotaReconciler(context.Context) (lifecycle.Close, error) {
	cfg := a.cfg
	// Its Close waits for the campaign to revoke its lease (before the etcd
	// client closes), so the next API server takes over at once.
	return lifecycle.Go(func(ctx context.Context) {
		cluster.RunElected(ctx, cluster.ElectionConfig{Client: cfg.Etcd, Prefix: cfg.Prefix, Task: QuotaReconcilerTask,
			ID: fmt.Sprintf("%s pid %d", cfg.Name, os.Getpid()), TTL: cfg.ElectionTTL, Logger: a.log},
			func(ctx context.Context) { a.Projects.Run(ctx, cfg.QuotaReconcile) })
	}), nil
}

func (a *APIServer) startFrontEnds(context.Context) (lifecycle.Close, error) {
	svc := a.services()
	// Tagged steps are logged on their sandbox's node.
	a.Server = v1.New(svc, v1.Options{Projects: a.Projects, Logger: a.log, StepsDownstream: true})
	builds := buildstate.NewEtcd(buildstate.EtcdConfig{Client: a.cfg.Etcd, Prefix: a.cfg.Prefix, Blobs: a.blobs,
		Runner: fmt.Sprintf("%s pid %d", a.cfg.Name, os.Getpid()), RunnerTTL: a.cfg.ElectionTTL, Logger: a.log})
	a.E2B = newE2B(svc, adminToken(a.Tokens), a.cfg.Secret, a.cfg.E2BDomain, builds, a.log)
	return func(context.Context) error { return a.E2B.Close() }, nil
}

// services composes the API tier's session interceptors: every front end
// calls the router through the request validation (session.Validating, the
// only one on the way to a node: the node RPC trusts it), metrics, the batch
// counter and the project guard.
func (a *APIServer) services() session.Service {
	a.svc = session.Chain(a.base, session.Validating(nil), a.Metrics.Interceptor(a.tracing), countBatches(a.cl), a.Projects.Interceptor())
	return a.svc
}

// QuotaReconcilerTask is the election (cluster.RunElected) whose leader runs
// the quota reconciler.
const QuotaReconcilerTask = "quota-reconciler"

// adminToken accepts only the default project's tokens: the front ends that
// do not scope sandboxes by project (E2B's API, the dashboard, /metrics).
func adminToken(toks *cluster.Tokens) func(string) bool {
	return func(tok string) bool {
		p, ok := toks.Project(tok)
		return ok && p == api.DefaultProject
	}
}

// Serve serves the /v1 API, GET /metrics and the dashboard (Handler) on l
// until Shutdown.
func (a *APIServer) Serve(l net.Listener) error {
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 30 * time.Second}
	a.mu.Lock() // Shutdown reads it from another goroutine
	a.http = srv
	a.mu.Unlock()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops serving and releases what the start-up steps started, in
// reverse order.
func (a *APIServer) Shutdown(ctx context.Context) error {
	var err error
	a.mu.Lock()
	hs := a.http
	a.mu.Unlock()
	if hs != nil {
		err = hs.Shutdown(ctx)
	}
	a.mu.Lock()
	for _, s := range a.extra {
		err = errors.Join(err, s.Shutdown(ctx))
	}
	a.mu.Unlock()
	return errors.Join(err, a.stack.Close(ctx))
}
