// Package apiserver is the assembly of `dsec apiserver`, a stateless API
// server of a cluster: the cluster secret, etcd, the API server's own steps
// (internal/apiserver: watches, placement, the router of internal/cluster/router, front ends) and its
// listeners, started as a declared list of steps (lifecycle.Steps), each
// registering its Close; a start-up that fails at any step releases
// everything started before it.
package apiserver

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/apiserver"
	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/httpkit"
)

// DefaultListen is the API's default address.
const DefaultListen = "127.0.0.1:7070"

// Config configures `dsec apiserver`.
type Config struct {
	// API is the API server's configuration (Etcd and Secret are filled in
	// from Etcd and SecretFile).
	API apiserver.Config
	// Etcd reaches the cluster's etcd.
	Etcd cluster.ClientConfig
	// SecretFile holds the cluster secret (noderpc.LoadSecret).
	SecretFile string
	// Listen is the API's address (default DefaultListen); MetricsListen,
	// when set, also serves GET /metrics there WITHOUT a token.
	Listen, MetricsListen string
	// ShutdownTimeout bounds the stop (default 30 s).
	ShutdownTimeout time.Duration
	// FailAfter, for tests, fails the start-up right after the step of this
	// name (StepNames).
	FailAfter string
}

type role struct {
	cfg   Config
	log   *slog.Logger
	cli   *clientv3.Client
	api   *apiserver.APIServer
	group lifecycle.Group
}

// StepNames names the start-up steps of `dsec apiserver`, in order.
func StepNames() []string {
	r := &role{}
	var inner []lifecycle.Step
	for _, n := range apiserver.StepNames() {
		inner = append(inner, lifecycle.Step{Name: n})
	}
	return lifecycle.Names(slices.Concat(r.before(), inner, r.after()))
}

// Run is `dsec apiserver`: it starts the API server and its listeners, serves
// until ctx ends or a listener fails, and stops, releasing everything in
// reverse order.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.API.Logger == nil {
		cfg.API.Logger = slog.Default()
	}
	r := &role{cfg: cfg, log: cfg.API.Logger}
	steps := slices.Concat(r.before(), []lifecycle.Step{{Name: "apiserver", Start: r.startAPIServer}}, r.after())
	return lifecycle.Run(ctx, steps, lifecycle.Options{FailAfter: cfg.FailAfter, Logger: r.log}, &r.group, cfg.ShutdownTimeout)
}

func (r *role) before() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "cluster-secret-file", Start: r.startSecret},
		{Name: "etcd", Start: r.startEtcd},
	}
}

func (r *role) after() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "listen", Start: r.startListener},
		{Name: "listen-metrics", Start: r.startMetricsListener},
	}
}

func (r *role) startSecret(context.Context) (lifecycle.Close, error) {
	secret, err := noderpc.LoadSecret(r.cfg.SecretFile)
	r.cfg.API.Secret = secret
	return nil, err
}

func (r *role) startEtcd(ctx context.Context) (lifecycle.Close, error) {
	cli, err := cluster.Connect(ctx, r.cfg.Etcd)
	if err != nil {
		return nil, err
	}
	r.cli = cli
	return func(context.Context) error { return cli.Close() }, nil
}

// startAPIServer starts the API server's own steps (apiserver.StepNames).
func (r *role) startAPIServer(ctx context.Context) (lifecycle.Close, error) {
	cfg := r.cfg.API
	cfg.Etcd = r.cli
	a, steps, err := apiserver.Open(cfg)
	if err != nil {
		return nil, err
	}
	if err := a.Start(ctx, steps, r.cfg.FailAfter); err != nil {
		return nil, err
	}
	r.api = a
	return a.Shutdown, nil
}

func (r *role) startListener(context.Context) (lifecycle.Close, error) {
	l, err := net.Listen("tcp", r.cfg.Listen)
	if err != nil {
		return nil, err
	}
	r.api.E2B.SetListenAddr(l.Addr().String())
	r.log.Info("dsec apiserver listening", "addr", "http://"+l.Addr().String(), "nodes", len(r.api.Watcher.Nodes()), "token_file", r.api.TokenFile,
		"e2b_domain", r.api.E2B.Domain())
	return r.serve(l, r.api.Handler()), nil
}

func (r *role) startMetricsListener(context.Context) (lifecycle.Close, error) {
	if r.cfg.MetricsListen == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", r.cfg.MetricsListen)
	if err != nil {
		return nil, err
	}
	r.log.Info("dsec apiserver metrics listening (no token)", "addr", "http://"+l.Addr().String()+apiserver.MetricsPath)
	mux := http.NewServeMux()
	mux.Handle("GET "+apiserver.MetricsPath, r.api.Metrics.Handler())
	return r.serve(l, mux), nil
}

// serve serves h on l as an actor of the run group; the Close stops it.
func (r *role) serve(l net.Listener, h http.Handler) lifecycle.Close {
	srv := httpkit.NewServer(h)
	r.group.Add(srv.Actor(l, r.cfg.ShutdownTimeout))
	return func(ctx context.Context) error { return srv.Stop(ctx, l) }
}
