package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/spf13/cobra"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/envstore"
	"github.com/dsec-dev/dsec/internal/noderpc"
	"github.com/dsec-dev/dsec/internal/placement"
	"github.com/dsec-dev/dsec/pkg/api"
)

// agentCmd runs a cluster node: the node agent served over the node RPC and
// registered in etcd.
func agentCmd() *cobra.Command {
	var cfg daemon.Config
	var ec cluster.ClientConfig
	var listen, advertise, secretFile, level, labels, metricsListen string
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "agent",
		Short: "Run a cluster node: the node agent, registered in etcd, serving API servers over RPC",
		Long: `Run one node of a dsec cluster. The agent owns this machine's sandboxes (they
outlive it: a restarted agent re-adopts them), admits or rejects what API servers
place here (--max-sandboxes), serves them over the node RPC on --listen
(authenticated with the cluster secret), and keeps a record of itself in etcd
under a lease of --ttl, renewed with its load every 2 s. A node that stops
renewing is lost after the TTL: its sandboxes answer node_lost until it is back.
GET /metrics on --listen serves the node's own metrics behind the node's API
token (DATA_DIR/token: a static bearer token a Prometheus scraper can hold,
unlike the node RPC's short-lived signed ones); --metrics-listen serves them
open on a listener of their own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			cfg.Logger = log
			ctx := cmd.Context()
			secret, err := noderpc.LoadSecret(secretFile)
			if err != nil {
				return err
			}
			csec, err := cluster.NewSecret(string(secret))
			if err != nil {
				return err
			}
			lbls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			if cfg.NodeName == "" {
				return errors.New("--node-name is required")
			}
			if advertise == "" {
				advertise = listen
			}
			if h, _, err := net.SplitHostPort(advertise); err != nil || h == "" || net.ParseIP(h).IsUnspecified() {
				return fmt.Errorf("--advertise %q: want the HOST:PORT API servers reach this node at", advertise)
			}
			cli, err := cluster.Connect(ctx, ec)
			if err != nil {
				return err
			}
			defer cli.Close()
			if err := cluster.CheckSecret(ctx, cli, "", csec); err != nil {
				return err
			}
			// Environments and the layer index are the cluster's (etcd), so
			// `create --image ENV` finds what any machine composed.
			cfg.ClusterEnvs = envstore.NewEtcdState(cli, "")
			d, err := daemon.New(ctx, cfg)
			if err != nil {
				return err
			}
			path, h := noderpc.NewHandler(d.NodeService(), noderpc.HandlerOptions{Secret: secret, Logger: log, Observer: d.Metrics()})
			mux := http.NewServeMux()
			mux.Handle(path, h)
			mux.Handle("GET "+daemon.MetricsPath, bearerOnly(d.Token, d.Metrics().Handler()))
			if metricsListen != "" {
				ml, err := net.Listen("tcp", metricsListen)
				if err != nil {
					_ = d.Shutdown(context.Background(), false)
					return err
				}
				log.Info("dsec agent metrics listening (no token)", "addr", "http://"+ml.Addr().String()+daemon.MetricsPath)
				go func() { _ = d.ServeMetrics(ml) }()
			}
			srv := noderpc.NewServer(mux, noderpc.ServerOptions{Logger: log})
			l, err := net.Listen("tcp", listen)
			if err != nil {
				_ = d.Shutdown(context.Background(), false)
				return err
			}
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(l) }()
			info, err := d.Manager.Info(ctx)
			if err != nil {
				_ = d.Shutdown(context.Background(), false)
				return err
			}
			started := time.Now().UTC()
			backends := info.Backends
			if d.FnCallEnabled() {
				backends = append(slices.Clip(backends), api.BackendFnCall)
			}
			report := func(ctx context.Context) (cluster.NodeRecord, error) {
				fnLoad, fnCap := d.FnCallLoad()
				return cluster.NodeRecord{
					Name: d.Manager.Node(), Addr: "http://" + advertise, Backends: backends, Labels: lbls,
					Capacity: placement.Resources{Sandboxes: int64(cfg.MaxSandboxes)},
					Load:     placement.Resources{Sandboxes: int64(d.Manager.Count())},
					Version:  info.Version, StartedAt: started,
					FnCallCapacity: int64(fnCap), FnCallLoad: int64(fnLoad),
					Layers: d.MountedLayers(ctx), // image locality
				}, nil
			}
			regCtx, stopReg := context.WithCancel(ctx)
			defer stopReg()
			if err := cluster.Register(regCtx, cluster.RegisterConfig{Client: cli, Secret: csec, TTL: ttl, Report: report, Logger: log}); err != nil {
				_ = d.Shutdown(context.Background(), false)
				return err
			}
			log.Info("dsec agent serving", "node", d.Manager.Node(), "rpc", "http://"+l.Addr().String(), "advertise", advertise,
				"sandboxes", d.Manager.Count(), "max_sandboxes", cfg.MaxSandboxes)
			select {
			case err = <-errc:
			case <-ctx.Done():
			}
			stopReg()
			sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			if serr := d.Shutdown(sctx, false); serr != nil && err == nil {
				err = serr
			}
			time.Sleep(100 * time.Millisecond) // let the lease revocation go out
			return err
		},
	}
	f := c.Flags()
	etcdFlags(f, &ec)
	f.StringVar(&cfg.NodeName, "node-name", "", "this node's name, part of every sandbox ID it creates (a-z, 0-9, '-')")
	f.StringVar(&listen, "listen", "127.0.0.1:7071", "address to serve the node RPC on")
	f.StringVar(&advertise, "advertise", "", "HOST:PORT API servers reach the node RPC at (default --listen)")
	f.StringVar(&secretFile, "cluster-secret-file", "", "file holding the cluster secret (mode 0600), the same on every agent and API server")
	f.StringVar(&metricsListen, "metrics-listen", "", "also serve GET /metrics WITHOUT a token on this address (e.g. 127.0.0.1:9090 for a local Prometheus)")
	f.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "export traces over OTLP/HTTP to this collector URL (default $OTEL_EXPORTER_OTLP_ENDPOINT; off when both are empty)")
	f.StringVar(&labels, "labels", "", "node labels KEY=VALUE,... that creates may constrain on (--constraint)")
	f.DurationVar(&ttl, "ttl", cluster.DefaultTTL, "lease TTL: the node counts as lost this long after it stops renewing")
	f.StringVar(&cfg.DataDir, "data-dir", daemon.DefaultDataDir, "directory for the node's state")
	f.StringVar(&cfg.ImagesDir, "images-dir", "", "image directory (default $DSEC_IMAGES_DIR or "+daemon.DefaultImagesDir+")")
	f.StringVar(&cfg.DefaultImage, "default-image", daemon.DefaultImage, "image for requests that name none")
	f.IntVar(&cfg.MaxSandboxes, "max-sandboxes", 1000, "admission limit: creates beyond it are rejected and placed elsewhere")
	f.StringVar(&cfg.BlobStore, "blob-store", "", "blob store of environments whose manifest names none, and where commits put their layers: in a cluster, the blob store every node shares (s3://... or dir:PATH on a shared mount; default dir:DATA_DIR/blobs)")
	f.IntVar(&cfg.MaxFnCalls, "max-fncalls", 64, "FnCalls this node runs or queues at once; more are refused and placed on another node")
	f.BoolVar(&cfg.NoFnCall, "no-fncall", false, "serve no FnCalls (the node does not advertise the fncall backend)")
	f.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	return c
}

// bearerOnly serves h to requests bearing token, refusing others as /v1 does.
func bearerOnly(token string, h http.Handler) http.Handler {
	tok := auth.NewToken(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tok.MatchBearer(r) {
			e := api.NewError(api.CodeUnauthorized, "missing or invalid bearer token (the node's DATA_DIR/token)")
			b, _ := json.Marshal(api.ErrorBody{Error: e})
			w.Header().Set("WWW-Authenticate", `Bearer realm="dsec"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(e.Status)
			_, _ = w.Write(append(b, '\n'))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// parseLabels parses KEY=VALUE,... with the placement engine's label syntax.
func parseLabels(s string) (map[string]string, error) {
	cs, err := placement.ParseConstraints(s)
	if err != nil {
		return nil, fmt.Errorf("--labels: %w", err)
	}
	return constraintMap(cs), nil
}

// parseConstraints parses create's repeated --constraint KEY=VALUE.
func parseConstraints(kvs []string) (map[string]string, error) {
	var cs []placement.Constraint
	for _, kv := range kvs {
		c, err := placement.ParseConstraint(kv)
		if err != nil {
			return nil, fmt.Errorf("--constraint: %w", err)
		}
		cs = append(cs, c)
	}
	return constraintMap(cs), nil
}

func constraintMap(cs []placement.Constraint) map[string]string {
	if len(cs) == 0 {
		return nil
	}
	m := make(map[string]string, len(cs))
	for _, c := range cs {
		m[c.Key] = c.Value
	}
	return m
}
