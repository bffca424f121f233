package node

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/internal/paths"
)

// ServerConfig configures `dsec server`: the node and its listeners.
type ServerConfig struct {
	Config
	// Listen is the API's address (default DefaultListen).
	Listen string
	// SandboxFusionListen and MetricsListen, when set, also serve
	// SandboxFusion's routes and GET /metrics there WITHOUT a token.
	SandboxFusionListen string
	MetricsListen       string
	// CleanupOnExit deletes every sandbox when the server stops.
	CleanupOnExit bool
	// ShutdownTimeout bounds the stop (default 60 s).
	ShutdownTimeout time.Duration
}

// ServerStepNames names the start-up steps of `dsec server`, in order.
func ServerStepNames() []string {
	d := &Daemon{}
	return lifecycle.Names(append(d.steps(), d.listenerSteps(&ServerConfig{}, &lifecycle.Group{})...))
}

// Run is `dsec server`: it starts the node and its listeners, serves until
// ctx ends or a listener fails, and stops, releasing everything in reverse
// order. A start-up that fails at any step releases what started before it.
func Run(ctx context.Context, cfg ServerConfig) error {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 60 * time.Second
	}
	d, steps, err := Open(cfg.Config)
	if err != nil {
		return err
	}
	var g lifecycle.Group
	if err := d.Start(ctx, append(steps, d.listenerSteps(&cfg, &g)...), cfg.FailAfter); err != nil {
		return err
	}
	g.Context(ctx)
	err = g.Run()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if serr := d.Shutdown(sctx, cfg.CleanupOnExit); serr != nil && err == nil {
		err = serr
	}
	d.cfg.Logger.Info("dsec server stopped", "deleted_sandboxes", cfg.CleanupOnExit)
	return err
}

// listenerSteps are the server's listeners, each served by an actor of g.
func (d *Daemon) listenerSteps(cfg *ServerConfig, g *lifecycle.Group) []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "listen", Start: func(context.Context) (lifecycle.Close, error) {
			l, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				return nil, err
			}
			d.E2B.SetListenAddr(l.Addr().String())
			d.cfg.Logger.Info("dsec server listening", "addr", "http://"+l.Addr().String(), "node", d.Manager.Node(), "data_dir", d.cfg.DataDir,
				"token_file", paths.New(d.cfg.DataDir).Token(), "sandboxes", d.Manager.Count(), "e2b_domain", d.E2B.Domain())
			return serve(g, l, d.observe(d.mainHandler()), cfg.ShutdownTimeout), nil
		}},
		{Name: "listen-sandboxfusion", Start: func(context.Context) (lifecycle.Close, error) {
			if cfg.SandboxFusionListen == "" {
				return nil, nil
			}
			l, err := net.Listen("tcp", cfg.SandboxFusionListen)
			if err != nil {
				return nil, err
			}
			d.cfg.Logger.Warn("SandboxFusion API listening WITHOUT a token (trusted networks only)", "addr", "http://"+l.Addr().String())
			return serve(g, l, d.sandboxFusion(), cfg.ShutdownTimeout), nil
		}},
		{Name: "listen-metrics", Start: func(context.Context) (lifecycle.Close, error) {
			if cfg.MetricsListen == "" {
				return nil, nil
			}
			l, err := net.Listen("tcp", cfg.MetricsListen)
			if err != nil {
				return nil, err
			}
			d.cfg.Logger.Warn("metrics listening WITHOUT a token", "addr", "http://"+l.Addr().String()+MetricsPath)
			return serve(g, l, d.MetricsHandler(), cfg.ShutdownTimeout), nil
		}},
	}
}

// serve adds an actor serving h on l to g, and returns the Close that stops
// it.
func serve(g *lifecycle.Group, l net.Listener, h http.Handler, timeout time.Duration) lifecycle.Close {
	srv := httpkit.NewServer(h)
	g.Add(srv.Actor(l, timeout))
	return func(ctx context.Context) error { return srv.Stop(ctx, l) }
}
