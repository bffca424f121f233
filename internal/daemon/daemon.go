// Package daemon wires one node together: the container driver, the node agent, the
// image store and the HTTP API, with the token and directory conventions of
// `dsec server`. The CLI, the benchmarks and the integration tests all start dsec
// through it, so they exercise the same assembly.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/blob"
	"github.com/dsec-dev/dsec/internal/commit"
	"github.com/dsec-dev/dsec/internal/container"
	"github.com/dsec-dev/dsec/internal/driver"
	"github.com/dsec-dev/dsec/internal/envstore"
	"github.com/dsec-dev/dsec/internal/fncall"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/images"
	"github.com/dsec-dev/dsec/internal/lazy"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/server"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/internal/vm/microvm"
)

// Defaults.
const (
	DefaultDataDir   = paths.DefaultRoot
	DefaultImagesDir = paths.DefaultRoot + "/images"
	DefaultImage     = "debian"
	DefaultListen    = "127.0.0.1:7070"
	// DefaultTrajMaxAge and DefaultTrajMax bound the trajectory log.
	DefaultTrajMaxAge = 7 * 24 * time.Hour
	DefaultTrajMax    = 100000
)

// Config configures a node.
type Config struct {
	DataDir      string // default DefaultDataDir
	ImagesDir    string // default $DSEC_IMAGES_DIR or DefaultImagesDir
	DefaultImage string // default DefaultImage
	// Token is the API bearer token; empty means read DataDir/token or create it.
	Token        string
	MaxSandboxes int
	// NodeName names this node in every sandbox ID it creates (default: the host
	// name made valid; see session.NewID).
	NodeName string
	Logger   *slog.Logger
	// TrajMaxAge deletes trajectories not updated for this long (default
	// DefaultTrajMaxAge; negative: never); TrajMax keeps at most this many, the
	// most recently updated (default DefaultTrajMax; negative: no limit).
	TrajMaxAge time.Duration
	TrajMax    int
	// TrajStore is the trajectory log's store: "pebble" (default,
	// DATA_DIR/trajectories/; an old DATA_DIR/trajectories.db is migrated once) or
	// "bolt" (DATA_DIR/trajectories.db).
	TrajStore string
	// Layers configures layerd, which mounts layered environments on demand
	// (Root defaults to DATA_DIR/layers); LayerPrefetch "full" fetches and verifies
	// whole layers before mounting instead of loading them on demand.
	Layers        lazy.Config
	LayerPrefetch string
	// ClusterEnvs, when set (dsec agent), keeps the environments and the layer
	// index in the cluster's etcd instead of DATA_DIR/envs, and marks there the
	// environments this node's sandboxes use (envstore.Uses).
	ClusterEnvs *envstore.EtcdState
	// MaxFnCalls bounds the FnCalls this node runs or queues at once; more are
	// refused with resource_exhausted, so a cluster's API server places them
	// elsewhere (0: no bound, as on one machine).
	MaxFnCalls int
	// NoFnCall leaves FnCall out (the node does not advertise the fncall
	// backend and refuses FnCalls).
	NoFnCall bool
	// BlobStore is the blob store spec of environments whose manifest names none
	// (default dir:DATA_DIR/blobs, where `dsec image build` puts layers by
	// default; paths.Paths.BlobSpec).
	BlobStore string
	// QoS: CPU classes, swap, idle reclaim (qos.go).
	QoS QoSConfig
	// Devices are added to every container sandbox (container.ParseDevice
	// syntax, e.g. "fuse:c:10:229"); MaxLogBytes caps each background
	// process log (0: agent.DefaultMaxLogBytes).
	Devices     []string
	MaxLogBytes int64
	// UserNS is the default of create's user_namespace for container
	// sandboxes (see container.Config.UserNS).
	UserNS bool
	// MaxFork bounds the children of one fork (0: agent.DefaultMaxFork).
	MaxFork int
	// NetworkRules are the operator's egress rule sets, each
	// "NAME=CIDR[:PORT[-PORT]][,...]" (dsec server --network-rule);
	// NetworkPool is the sandbox link address pool (default
	// netpolicy.DefaultPool).
	NetworkRules []string
	NetworkPool  string
	// OTLPEndpoint exports traces over OTLP/HTTP to this URL (default
	// $OTEL_EXPORTER_OTLP_ENDPOINT; both empty: tracing is off). Tracing, if
	// set, is the tracer provider instead (tests).
	OTLPEndpoint string
	Tracing      *tracing.Provider
	// NoMicroVM leaves the microvm backend out even when its guest kernel is
	// installed.
	NoMicroVM bool
	// NoVMSnapshots boots every microVM (no launch snapshots to restore
	// from, internal/vm/microvm/snapshot.go).
	NoVMSnapshots bool
	// NoFullVM leaves the fullvm backend out even when its base image is
	// built.
	NoFullVM bool
}

// Daemon is one running node: agent plus HTTP handler.
type Daemon struct {
	Manager *agent.Manager
	Driver  *container.Driver
	Network *netpolicy.Manager // sandboxes' egress policies
	Server  *server.Server
	// E2B serves E2B's API (control plane and envd) on the same listener.
	E2B   *e2b.Handler
	Token string
	// Trajectories is the trajectory log (Config.TrajStore).
	Trajectories trajectory.Store
	// FnCall is the online-judge engine behind /v1/fncall (pools start on first use).
	FnCall *fncall.Engine
	// Layers talks to layerd (started on the first layered environment; it
	// outlives this process so running sandboxes keep their file systems).
	Layers    *lazy.Client
	cfg       Config
	mu        sync.Mutex
	extra     []*http.Server // other listeners (SandboxFusion's token-less one)
	http      *http.Server
	stopPrune chan struct{}
	pruneDone chan struct{}
	stopUses  context.CancelFunc
	qos       *qos
	obs       observability
	node      node
	nodeSvc   nodeService
	stopGuard context.CancelFunc // the quota reconciler
}

// New opens the node: it re-adopts the sandboxes recorded under DataDir.
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	if cfg.ImagesDir == "" {
		cfg.ImagesDir = os.Getenv("DSEC_IMAGES_DIR")
	}
	if cfg.ImagesDir == "" {
		cfg.ImagesDir = DefaultImagesDir
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = DefaultImage
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = slog.New(tracing.LogHandler(cfg.Logger.Handler())) // request IDs in every line
	if os.Geteuid() != 0 {
		return nil, errors.New("dsec must run as root (it creates namespaces, cgroups and mounts)")
	}
	raiseNoFile()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	dirs := paths.New(cfg.DataDir)
	token, err := loadToken(dirs.Token(), cfg.Token)
	if err != nil {
		return nil, err
	}
	obs, err := newObservability(ctx, cfg)
	if err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened { // flush and stop the exporter of a node that did not open
			_ = obs.tracing.Shutdown(context.Background())
		}
	}()
	q, qcfg, err := setupQoS(cfg.QoS, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var devs []container.Device
	for _, s := range cfg.Devices {
		d, err := container.ParseDevice(s)
		if err != nil {
			return nil, fmt.Errorf("--device: %w", err)
		}
		devs = append(devs, d)
	}
	netm, err := openNetwork(cfg)
	if err != nil {
		return nil, err
	}
	drv, err := container.New(container.Config{StateDir: dirs.Containers(), Devices: devs,
		UserNS: cfg.UserNS, Logger: cfg.Logger, Network: netm})
	if err != nil {
		_ = q.close()
		return nil, err
	}
	if cfg.Layers.Root == "" {
		cfg.Layers.Root = dirs.Layers()
	}
	layers := lazy.NewClient(cfg.Layers)
	blobSpec := dirs.BlobSpec(cfg.BlobStore)
	blobs, err := blob.Open(blobSpec, true)
	if err != nil {
		drv.Close()
		return nil, fmt.Errorf("blob store: %w", err)
	}
	var envs *envstore.Store
	if cfg.ClusterEnvs != nil {
		envs = envstore.New(cfg.ClusterEnvs, blobs)
	} else if envs, err = envstore.Open(dirs.EnvStore(), blobs); err != nil {
		drv.Close()
		return nil, err
	}
	envs.Spec = blobSpec
	drivers, err := registerDrivers(cfg, drv)
	if err != nil {
		drv.Close()
		return nil, err
	}
	mgr, err := agent.New(ctx, agent.Config{
		DataDir: cfg.DataDir, Driver: drv, Drivers: drivers, Logger: cfg.Logger, MaxSandboxes: cfg.MaxSandboxes, Node: cfg.NodeName,
		MaxLogBytes: cfg.MaxLogBytes, QoS: qcfg, Tracer: obs.tracing, Observer: obs.metrics,
		MaxFork: cfg.MaxFork, Packer: &commit.Packer{Blobs: blobs, Envs: envs, TempDir: dirs.Commits()},
		Images: &images.Store{Dir: cfg.ImagesDir, Default: cfg.DefaultImage, BlobStore: blobSpec,
			Layers: lazy.Mounter{Client: layers, Prefetch: cfg.LayerPrefetch},
			Envs:   envstore.Images{Store: envs, DefaultSpec: blobSpec}},
	})
	if err != nil {
		drv.Close()
		return nil, err
	}
	envs.InUse = mgr.ImageInUse
	var uses *envstore.Uses
	if cfg.ClusterEnvs != nil {
		uses = &envstore.Uses{State: cfg.ClusterEnvs, Node: mgr.Node(), InUse: mgr.ImageInUse, Logger: cfg.Logger}
		if err := uses.Load(ctx); err != nil {
			mgr.Close()
			drv.Close()
			return nil, err
		}
	}
	traj, err := trajectory.OpenNode(ctx, cfg.DataDir, cfg.TrajStore, cfg.Logger)
	if err != nil {
		mgr.Close()
		drv.Close()
		return nil, err
	}
	fc, err := fncall.New(fncall.Config{
		StateDir: dirs.FnCall(), Logger: cfg.Logger,
		Images: &images.Store{Dir: cfg.ImagesDir, Default: fncall.DefaultImage},
	})
	if err != nil {
		traj.Close()
		mgr.Close()
		drv.Close()
		return nil, err
	}
	n := node{Manager: mgr, fc: fc, envs: envs, layers: layers, uses: uses, noFnCall: cfg.NoFnCall, imagesDir: cfg.ImagesDir}
	if cfg.MaxFnCalls > 0 {
		n.fnSlots = make(chan struct{}, cfg.MaxFnCalls)
	}
	// Projects and quotas: the same Guard as an API server's, over a store in
	// DATA_DIR/projects.json; reservations are rebuilt from the sandboxes now.
	projects, err := project.OpenLocal(filepath.Join(cfg.DataDir, "projects.json"), token)
	if err != nil {
		_ = fc.Close()
		traj.Close()
		mgr.Close()
		drv.Close()
		return nil, err
	}
	guard := project.NewGuard(n, projects, cfg.Logger)
	if err := guard.Reconcile(ctx); err != nil {
		cfg.Logger.Warn("quota: counting the sandboxes of projects with quotas", "err", err)
	}
	// Every front end calls the node through the trajectory log, metrics (a
	// replayed step runs nothing: no exec) and the project guard.
	tlog := trajectory.Interceptor(obs.metrics.WrapStore(traj), trajectory.Options{Logger: cfg.Logger})
	svc := session.Chain(n, tlog, obs.metrics.Interceptor(obs.tracing), guard.Interceptor())
	obs.svc = svc
	nc := obs.metrics.NewNodeCollector(mgr, layers, fc)
	if err := obs.metrics.Register(nc); err != nil {
		_ = fc.Close()
		traj.Close()
		mgr.Close()
		drv.Close()
		return nil, err
	}
	ncCtx, stopNC := context.WithCancel(context.Background())
	obs.stop = stopNC
	go nc.Run(ncCtx)
	srv := server.New(svc, server.Options{Projects: guard, Logger: cfg.Logger, Steps: true})
	e2bH := e2b.New(svc, e2b.Options{Authorize: auth.NewToken(token).Match, Secret: []byte(token), Logger: cfg.Logger})
	if err := e2bH.Recover(ctx); err != nil {
		cfg.Logger.Warn("e2b: re-arming sandbox timeouts", "err", err)
	}
	// A cluster node's service (NodeService) logs and replays the steps that
	// reach it over the node RPC in the node's own trajectory store, next to
	// the sandboxes.
	// (the same chain without the guard: quotas are the API tier's).
	nsvc := nodeService{Service: session.Chain(n, tlog, obs.metrics.Interceptor(obs.tracing)), node: n}
	d := &Daemon{nodeSvc: nsvc, Manager: mgr, Driver: drv, Network: netm, Server: srv, E2B: e2bH, Token: token, Trajectories: traj, FnCall: fc, Layers: layers, cfg: cfg, qos: q, obs: obs, node: n,
		stopPrune: make(chan struct{}), pruneDone: make(chan struct{})}
	go d.pruneLoop()
	gctx, stopGuard := context.WithCancel(context.WithoutCancel(ctx))
	d.stopGuard = stopGuard
	go guard.Run(gctx, 30*time.Second)
	d.stopUses = func() {}
	if uses != nil {
		uctx, cancel := context.WithCancel(context.Background())
		d.stopUses = cancel
		go uses.Run(uctx, usesSyncInterval, n.usedEnvs)
	}
	opened = true
	return d, nil
}

// registerDrivers is the node's backends: container (the default) and,
// when the guest kernel is installed (scripts/setup.sh), microvm.
func registerDrivers(cfg Config, drv *container.Driver) (*driver.Registry, error) {
	all := []driver.Driver{drv}
	if !cfg.NoMicroVM {
		vm, err := microvm.New(microvm.Config{StateDir: filepath.Join(cfg.DataDir, "microvm"), Logger: cfg.Logger,
			NoSnapshots: cfg.NoVMSnapshots})
		if err != nil {
			cfg.Logger.Warn("microvm backend not available", "err", err)
		} else {
			all = append(all, vm)
			go vm.Accel(context.Background()) // the KVM probe, once per host boot
		}
	}
	if !cfg.NoFullVM {
		all = append(all, fullVMDriver(cfg)...)
	}
	return driver.NewRegistry(all...)
}

// pruneLoop applies the trajectory retention limits at start and every 10 minutes.
func (d *Daemon) pruneLoop() {
	defer close(d.pruneDone)
	age, maxN := d.cfg.TrajMaxAge, d.cfg.TrajMax
	if age == 0 {
		age = DefaultTrajMaxAge
	}
	if maxN == 0 {
		maxN = DefaultTrajMax
	}
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		var cutoff time.Time
		if age > 0 {
			cutoff = time.Now().Add(-age)
		}
		if n, err := d.Trajectories.Prune(context.Background(), cutoff, max(0, maxN)); err != nil {
			d.cfg.Logger.Error("pruning trajectories", "err", err)
		} else if n > 0 {
			d.cfg.Logger.Info("pruned trajectories", "deleted", n)
		}
		select {
		case <-d.stopPrune:
			return
		case <-t.C:
		}
	}
}

// Serve serves the API on l until Shutdown.
func (d *Daemon) Serve(l net.Listener) error {
	srv := &http.Server{Handler: d.observe(e2b.Mount(d.Handler(), d.E2B)), ReadHeaderTimeout: 30 * time.Second}
	d.mu.Lock() // Shutdown reads it from another goroutine
	d.http = srv
	d.mu.Unlock()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops serving and background work; sandboxes keep running unless
// deleteAll is set.
func (d *Daemon) Shutdown(ctx context.Context, deleteAll bool) error {
	var errs []error
	d.mu.Lock()
	hs, extra := d.http, d.extra
	d.mu.Unlock()
	if hs != nil {
		errs = append(errs, hs.Shutdown(ctx))
	}
	for _, srv := range extra {
		errs = append(errs, srv.Shutdown(ctx))
	}
	errs = append(errs, d.E2B.Close())
	if deleteAll {
		errs = append(errs, d.Manager.DeleteAll(ctx))
	}
	errs = append(errs, d.stopLayersIfIdle(ctx))
	close(d.stopPrune)
	<-d.pruneDone
	d.stopGuard()
	d.stopUses()
	d.obs.stop()
	errs = append(errs, d.FnCall.Close(), d.Manager.Close(), d.Driver.Close(), d.Network.Close(), d.Trajectories.Close(), d.qos.close(),
		d.obs.tracing.Shutdown(ctx))
	return errors.Join(errs...)
}

// NodeService is the node's session service for a cluster's node RPC: the agent
// with FnCall and images, behind the trajectory log over the node's own
// trajectory store (so it also serves session.Trajectories) and metrics.
func (d *Daemon) NodeService() session.Service { return d.nodeSvc }

// nodeService is the node's service as a cluster serves it: the node behind
// the trajectory log and metrics.
type nodeService struct {
	session.Service
	node node
}

// node is the agent plus the FnCall engine and the environment store (the
// session.FnCalls and session.Images groups): every role's base service.
type node struct {
	*agent.Manager
	fc     *fncall.Engine
	envs   *envstore.Store
	layers *lazy.Client
	// uses marks the environments in use in the cluster's etcd (nil: one
	// machine, where envs.InUse asks the agent).
	uses *envstore.Uses
	// fnSlots bounds the FnCalls in flight (nil: unbounded); noFnCall refuses
	// them all.
	fnSlots   chan struct{}
	noFnCall  bool
	imagesDir string
}

// loadToken returns configured, else the token in file p (created if missing).
func loadToken(p, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(raw[:])
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write token: %w", err)
	}
	return tok, nil
}

// raiseNoFile lifts the soft open-file limit to the hard one: every sandbox costs
// a pidfd, and a busy node holds many pipes and sockets.
func raiseNoFile() {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &rl)
	}
}
