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

	"github.com/dsec-dev/dsec/internal/blob"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/envstore"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/metrics"
	"github.com/dsec-dev/dsec/internal/noderpc"
	"github.com/dsec-dev/dsec/internal/placement"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/server"
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
	Router  *Router
	Engine  *placement.Engine
	Watcher *cluster.Watcher
	Tokens  *cluster.Tokens
	// Projects enforces projects and quotas over the router.
	Projects *project.Guard
	Server   *server.Server
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
	cancel    context.CancelFunc
	mu        sync.Mutex
	extra     []*http.Server // ServeMetrics
}

// New starts an API server's background work (watches, placement refresh)
// until Shutdown.
func New(ctx context.Context, cfg Config) (*APIServer, error) {
	if cfg.Etcd == nil || len(cfg.Secret) == 0 || cfg.DataDir == "" {
		return nil, errors.New("apiserver: Etcd, Secret and DataDir are required")
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
	secret, err := cluster.NewSecret(string(cfg.Secret))
	if err != nil {
		return nil, err
	}
	if err := cluster.CheckSecret(ctx, cfg.Etcd, cfg.Prefix, secret); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	fail := func(err error) (*APIServer, error) { cancel(); return nil, err }
	w, err := cluster.NewWatcher(bg, cluster.WatcherConfig{Client: cfg.Etcd, Prefix: cfg.Prefix, Secret: secret, Logger: cfg.Logger})
	if err != nil {
		return fail(err)
	}
	tokenFile := filepath.Join(cfg.DataDir, "token")
	toks, err := cluster.OpenTokens(bg, cfg.Etcd, cfg.Prefix, tokenFile, cfg.Name, cfg.Logger)
	if err != nil {
		return fail(err)
	}
	projects, err := cluster.OpenProjects(bg, cfg.Etcd, cfg.Prefix, toks, cfg.Logger)
	if err != nil {
		return fail(err)
	}
	eng := placement.New(w, cfg.Placement)
	if err := eng.Refresh(bg); err != nil {
		return fail(err)
	}
	go eng.Watch(bg)
	fnEng := placement.New(FnCallSource{Nodes: w}, cfg.Placement)
	if err := fnEng.Refresh(bg); err != nil {
		return fail(err)
	}
	go fnEng.Watch(bg)
	var blobs blob.Store
	if cfg.BlobStore != "" {
		if blobs, err = blob.Open(cfg.BlobStore, false); err != nil {
			return fail(fmt.Errorf("--blob-store: %w", err))
		}
	}
	envs := envstore.New(envstore.NewEtcdState(cfg.Etcd, cfg.Prefix), blobs)
	envs.Spec = cfg.BlobStore
	m, cl, err := newMetrics(w)
	if err != nil {
		return fail(err)
	}
	tp := cfg.Tracing
	if tp == nil {
		if tp, err = tracing.New(bg, tracing.Config{Endpoint: cfg.OTLPEndpoint, ServiceName: "dsec-apiserver"}); err != nil {
			return fail(err)
		}
	}
	rt := NewRouter(RouterConfig{
		Nodes: w, Engine: eng, FnCalls: fnEng, Logger: cfg.Logger, Observer: cl, Tracer: tp,
		EnvLayers: (&LayerCache{Store: envs}).Layers,
		Claims:    cluster.NewRequests(cfg.Etcd, cfg.Prefix),
		Drainer:   nodeAdmin{Admin: cluster.Admin{Client: cfg.Etcd, Prefix: cfg.Prefix}, marks: envstore.NewEtcdState(cfg.Etcd, cfg.Prefix)},
		Dial: func(n cluster.NodeStatus) session.Service {
			return noderpc.NewClient(n.Addr, noderpc.ClientOptions{Secret: cfg.Secret, Tracer: tp})
		},
	})
	base := Cluster{Router: rt, Envs: &Images{Store: envs, Router: rt}}
	guard := project.NewGuard(base, projects, cfg.Logger)
	if cfg.QuotaReconcile <= 0 {
		cfg.QuotaReconcile = 30 * time.Second
	}
	// One API server at a time reconciles quotas (etcd's election recipe);
	// another takes over within the election TTL when it dies.
	go cluster.RunElected(bg, cluster.ElectionConfig{Client: cfg.Etcd, Prefix: cfg.Prefix, Task: QuotaReconcilerTask,
		ID: fmt.Sprintf("%s pid %d", cfg.Name, os.Getpid()), TTL: cfg.ElectionTTL, Logger: cfg.Logger},
		func(ctx context.Context) { guard.Run(ctx, cfg.QuotaReconcile) })
	// Every front end calls the router through metrics, the batch counter and
	// the project guard; tagged steps are logged on their sandbox's node.
	svc := session.Chain(base, m.Interceptor(tp), countBatches(cl), guard.Interceptor())
	srv := server.New(svc, server.Options{Projects: guard, Logger: cfg.Logger, StepsDownstream: true})
	e2bH := newE2B(bg, svc, adminToken(toks), cfg.Secret, cfg.Logger)
	return &APIServer{E2B: e2bH, Router: rt, Engine: eng, Watcher: w, Tokens: toks, Projects: guard, Server: srv, Metrics: m, TokenFile: tokenFile,
		svc: svc, tracing: tp, log: cfg.Logger, cancel: cancel}, nil
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

// Shutdown stops serving and the background work.
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
	a.cancel()
	return errors.Join(err, a.E2B.Close(), a.Router.Close(), a.tracing.Shutdown(ctx))
}
