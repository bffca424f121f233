// Package agent is the assembly of `dsec agent`, one node of a cluster: the
// node (internal/app/node) with its environments in the cluster's etcd,
// served to the API servers over the node RPC and registered in etcd with its
// load. It starts as a declared list of steps (lifecycle.Steps), each
// registering its Close; a start-up that fails at any step releases
// everything started before it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultListen is the node RPC's default address.
const DefaultListen = "127.0.0.1:7071"

// Config configures `dsec agent`.
type Config struct {
	// Node is the node's configuration (NodeName is required).
	Node node.Config
	// Etcd reaches the cluster's etcd.
	Etcd cluster.ClientConfig
	// Listen is the node RPC's address (default DefaultListen); Advertise is
	// the HOST:PORT API servers reach it at (default Listen).
	Listen, Advertise string
	// SecretFile holds the cluster secret (noderpc.LoadSecret).
	SecretFile string
	// Labels are the node's labels, KEY=VALUE,... (placement constraints).
	Labels map[string]string
	// MetricsListen, when set, also serves GET /metrics there WITHOUT a token.
	MetricsListen string
	// TTL is the lease TTL of the node's record (default cluster.DefaultTTL).
	TTL time.Duration
	// ShutdownTimeout bounds the stop (default 60 s).
	ShutdownTimeout time.Duration
	// FailAfter, for tests, fails the start-up right after the step of this
	// name (StepNames).
	FailAfter string
}

// agent is one starting or running agent: what the steps made.
type agent struct {
	cfg     Config
	log     *slog.Logger
	secret  []byte
	csec    cluster.Secret
	cli     *clientv3.Client
	node    *node.Daemon
	mux     *http.ServeMux
	rpcAddr string
	group   lifecycle.Group
}

// StepNames names the agent's start-up steps, in order.
func StepNames() []string {
	a := &agent{}
	return lifecycle.Names(slices.Concat(a.before(), nodeStepNames(), a.after()))
}

func nodeStepNames() []lifecycle.Step {
	var out []lifecycle.Step
	for _, n := range node.StepNames() {
		out = append(out, lifecycle.Step{Name: n})
	}
	return out
}

// Run is `dsec agent`: it starts the node, serves the node RPC, registers the
// node in etcd, serves until ctx ends or the RPC listener fails, and stops,
// releasing everything in reverse order.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.Listen
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 60 * time.Second
	}
	if cfg.Node.Logger == nil {
		cfg.Node.Logger = slog.Default()
	}
	a := &agent{cfg: cfg, log: cfg.Node.Logger}
	steps := slices.Concat(a.before(), []lifecycle.Step{{Name: "node", Start: a.startNode}}, a.after())
	return lifecycle.Run(ctx, steps, lifecycle.Options{FailAfter: cfg.FailAfter, Logger: a.log}, &a.group, cfg.ShutdownTimeout)
}

// before are the steps before the node's: the cluster secret, etcd.
func (a *agent) before() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "cluster-secret", Start: a.startSecret},
		{Name: "etcd", Start: a.startEtcd},
	}
}

// after are the steps after the node's: the node RPC, its listeners, the
// registration.
func (a *agent) after() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "node-rpc", Start: a.startRPC},
		{Name: "listen-metrics", Start: a.startMetricsListener},
		{Name: "listen", Start: a.startListener},
		{Name: "register", Start: a.startRegister},
	}
}

func (a *agent) startSecret(context.Context) (lifecycle.Close, error) {
	if a.cfg.Node.NodeName == "" {
		return nil, errors.New("--node-name is required")
	}
	if h, _, err := net.SplitHostPort(a.cfg.Advertise); err != nil || h == "" || net.ParseIP(h).IsUnspecified() {
		return nil, fmt.Errorf("--advertise %q: want the HOST:PORT API servers reach this node at", a.cfg.Advertise)
	}
	secret, err := noderpc.LoadSecret(a.cfg.SecretFile)
	if err != nil {
		return nil, err
	}
	a.secret = secret
	a.csec, err = cluster.NewSecret(string(secret))
	return nil, err
}

func (a *agent) startEtcd(ctx context.Context) (lifecycle.Close, error) {
	cli, err := cluster.Connect(ctx, a.cfg.Etcd)
	if err != nil {
		return nil, err
	}
	a.cli = cli
	closeCli := func(context.Context) error { return cli.Close() }
	if err := cluster.CheckSecret(ctx, cli, "", a.csec); err != nil {
		return closeCli, err
	}
	if err := cluster.CheckFormat(ctx, cli, ""); err != nil {
		return closeCli, err
	}
	return closeCli, nil
}

// startNode starts the node's own steps (node.StepNames) with the
// environments and the layer index in the cluster's etcd, so
// `create --image ENV` finds what any machine composed.
func (a *agent) startNode(ctx context.Context) (lifecycle.Close, error) {
	cfg := a.cfg.Node
	cfg.ClusterEnvs = envstore.NewEtcdState(a.cli, "")
	if cfg.BlobStore != "" {
		// A blob store the nodes share (the default, DATA_DIR/blobs, is each
		// node's own): each layer pulled by reference is fetched once for all.
		// Its claims live as long as the node's record: a node that dies
		// passes its fetches on when it is lost.
		ttl := 0
		if a.cfg.TTL > 0 {
			ttl = int(math.Ceil(a.cfg.TTL.Seconds()))
		}
		cfg.LayerClaims = &pull.EtcdClaims{Client: a.cli, Prefix: pull.ClaimsPrefix("", cfg.BlobStore), Node: cfg.NodeName, TTL: ttl}
		// Every node publishes what it holds, so that the nodes evicting
		// (--blob-store-bytes) never delete a blob it uses.
		cfg.BlobGC = &pull.StoreGC{Client: a.cli, Prefix: pull.ClaimsPrefix("", cfg.BlobStore), Node: cfg.NodeName, Budget: cfg.BlobStoreBytes}
	} else if cfg.BlobStoreBytes > 0 {
		return nil, errors.New("--blob-store-bytes needs --blob-store (a blob store the nodes share; the node's own is bounded by --image-cache-bytes)")
	}
	d, steps, err := node.Open(cfg)
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx, steps, a.cfg.FailAfter); err != nil {
		return nil, err
	}
	a.node = d
	return func(ctx context.Context) error { return d.Shutdown(ctx, false) }, nil
}

// startRPC builds the RPC listener's routes: the node RPC (signed cluster
// tokens) and GET /metrics behind the node's API token (DATA_DIR/token).
func (a *agent) startRPC(context.Context) (lifecycle.Close, error) {
	d := a.node
	path, h := noderpc.NewHandler(d.NodeService(), noderpc.HandlerOptions{Secret: a.secret, Logger: a.log, Observer: d.Metrics()})
	a.mux = http.NewServeMux()
	a.mux.Handle(path, h)
	a.mux.Handle("GET "+node.MetricsPath, httpkit.Token(d.Token).
		With(httpkit.DenyJSON(httpkit.UnauthorizedMessage+" (the node's DATA_DIR/token)")).Wrap(d.Metrics().Handler()))
	return nil, nil
}

func (a *agent) startMetricsListener(context.Context) (lifecycle.Close, error) {
	if a.cfg.MetricsListen == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", a.cfg.MetricsListen)
	if err != nil {
		return nil, err
	}
	a.log.Info("dsec agent metrics listening (no token)", "addr", "http://"+l.Addr().String()+node.MetricsPath)
	srv := httpkit.NewServer(a.node.MetricsHandler())
	// Not an actor of the run group: the metrics listener failing does not
	// stop the node (as before).
	go func() { _ = srv.Serve(l) }()
	return func(ctx context.Context) error { return srv.Stop(ctx, l) }, nil
}

func (a *agent) startListener(context.Context) (lifecycle.Close, error) {
	l, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return nil, err
	}
	a.rpcAddr = l.Addr().String()
	srv := httpkit.Of(noderpc.NewServer(a.mux, noderpc.ServerOptions{Logger: a.log}))
	a.group.Add(srv.Actor(l, a.cfg.ShutdownTimeout))
	return func(ctx context.Context) error { return srv.Stop(ctx, l) }, nil
}

// startRegister keeps the node's record in etcd, renewed with its load; its
// Close revokes the lease so the node shows as lost at once.
func (a *agent) startRegister(ctx context.Context) (lifecycle.Close, error) {
	d := a.node
	info, err := d.Manager.Info(ctx)
	if err != nil {
		return nil, err
	}
	started := time.Now().UTC()
	backends := info.Backends
	if d.FnCallEnabled() {
		backends = append(slices.Clip(backends), api.BackendFnCall)
	}
	report := func(ctx context.Context) (cluster.NodeRecord, error) {
		fnLoad, fnCap := d.FnCallLoad()
		return cluster.NodeRecord{
			Name: d.Manager.Node(), Addr: "http://" + a.cfg.Advertise, Backends: backends, Labels: a.cfg.Labels,
			Hardware: d.Hardware(),
			Capacity: placement.Resources{Sandboxes: int64(a.cfg.Node.MaxSandboxes)},
			Load:     placement.Resources{Sandboxes: int64(d.Manager.Count())},
			Version:  info.Version, StartedAt: started,
			FnCallCapacity: int64(fnCap), FnCallLoad: int64(fnLoad),
			Layers: d.MountedLayers(ctx), // image locality
		}, nil
	}
	regCtx, stopReg := context.WithCancel(context.WithoutCancel(ctx))
	stop := func(context.Context) error {
		stopReg()
		time.Sleep(100 * time.Millisecond) // let the lease revocation go out
		return nil
	}
	if err := cluster.Register(regCtx, cluster.RegisterConfig{Client: a.cli, Secret: a.csec, TTL: a.cfg.TTL, Report: report, Logger: a.log}); err != nil {
		stopReg()
		return nil, err
	}
	a.log.Info("dsec agent serving", "node", d.Manager.Node(), "rpc", "http://"+a.rpcAddr, "advertise", a.cfg.Advertise,
		"sandboxes", d.Manager.Count(), "max_sandboxes", a.cfg.Node.MaxSandboxes)
	return stop, nil
}
