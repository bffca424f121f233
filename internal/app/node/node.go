// Package node is the assembly of one node (dsec server, and the node under
// dsec agent): it wires the container driver, the node agent, the
// image store and the HTTP API, with the token and directory conventions of
// `dsec server`. The CLI, the benchmarks and the integration tests all start dsec
// through it, so they exercise the same assembly.
package node

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
	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/fncall"
	"github.com/dsec-dev/dsec/internal/backend/vm/microvm"
	"github.com/dsec-dev/dsec/internal/datafmt"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/internal/image/commit"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/internal/trajectory"
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
	Token string
	// E2BDomain is the sandbox domain of E2B's API (e2b.Options.Domain;
	// empty: "localhost:PORT" of the API listener).
	E2BDomain    string
	MaxSandboxes int
	// WarmPool keeps this many sandboxes started ahead of the creates that
	// take them (agent.Config.WarmPool; 0: none).
	WarmPool int
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
	// GPU says whether the node advertises a GPU (gpu.go): GPUAuto (""),
	// GPUOn or GPUOff; GPUDevDir is where GPUAuto looks for NVIDIA device
	// nodes (default /dev).
	GPU       string
	GPUDevDir string
	// BlobStore is the blob store spec of environments whose manifest names none
	// (default dir:DATA_DIR/blobs, where `dsec image build` puts layers by
	// default; paths.Paths.BlobSpec).
	BlobStore string
	// LayerClaims, when set (dsec agent with a shared --blob-store), makes
	// the nodes sharing BlobStore fetch each layer of an image by reference
	// from its registry once (pull.Puller.Claims).
	LayerClaims pull.LayerClaims
	// BlobGC, when set (dsec agent with a shared --blob-store), publishes in
	// the cluster's etcd the blobs this node holds and, with a Budget
	// (--blob-store-bytes), evicts the shared store's least recently used
	// blobs no node holds (pull.StoreGC; Blobs, Log, Node and Grace are set
	// here).
	BlobGC *pull.StoreGC
	// Registries says how images named by registry reference are fetched
	// (credentials, hosts.toml mirrors, insecure registries).
	Registries registry.Config
	// ImageCacheBytes is the byte budget of the images pulled by reference
	// (0: no limit; pull.Puller.Budget): least recently used images no
	// sandbox uses are evicted after a pull that puts the cache over it.
	ImageCacheBytes int64
	// BlobStoreBytes is the byte budget of a shared BlobStore (dsec agent
	// --blob-store-bytes; BlobGC.Budget).
	BlobStoreBytes int64
	// BuildCacheBytes is the byte budget of the Dockerfile build cache's
	// layers (0: no limit; build.Builder.CacheBudget; the flags' default is
	// build.DefaultCacheBudget).
	BuildCacheBytes int64
	// QoS: CPU classes, swap, idle reclaim (qos.go).
	QoS QoSConfig
	// Devices are added to every container sandbox (container.ParseDevice
	// syntax, e.g. "fuse:c:10:229"); MaxLogBytes caps each background
	// process log (0: agent.DefaultMaxLogBytes).
	Devices     []string
	MaxLogBytes int64
	// KeepAlive is how long a blocking /v1 exec or process wait stays silent
	// before whitespace keeps its connection busy (v1.Options.KeepAlive).
	KeepAlive time.Duration
	// UserNS is the default of create's user_namespace for container
	// sandboxes (see container.Config.UserNS).
	UserNS bool
	// NoFavorDynMods leaves a cgroup v1 host's cgroups as they are (see
	// container.Config.NoFavorDynMods).
	NoFavorDynMods bool
	// MaxFork bounds the children of one fork (0: agent.DefaultMaxFork).
	MaxFork int
	// NetworkRules are the operator's egress rule sets, each
	// "NAME=CIDR[:PORT[-PORT]][,...]" (dsec server --network-rule);
	// NetworkPool is the sandbox link address pool (default
	// netpolicy.DefaultPool).
	NetworkRules []string
	NetworkPool  string
	// NetworkDNS is the resolver the node's DNS forwarder asks for egress
	// sandboxes (netpolicy.Config.DNS: "" the node's resolv.conf, "off" none).
	NetworkDNS string
	// NetworkNoHostCheck turns off the check of TLS SNI and HTTP Host on
	// flows domain rules admit (netpolicy.Config.NoHostCheck).
	NetworkNoHostCheck bool
	// OTLPEndpoint exports traces over OTLP/HTTP to this URL (default
	// $OTEL_EXPORTER_OTLP_ENDPOINT; both empty: tracing is off). Tracing, if
	// set, is the tracer provider instead (tests).
	OTLPEndpoint string
	Tracing      *tracing.Provider
	// NoMicroVM leaves the microvm backend out even when its guest kernel is
	// installed.
	NoMicroVM bool
	// NoVMSnapshots boots every microVM (no launch snapshots to restore
	// from, internal/backend/vm/microvm/snapshot.go).
	NoVMSnapshots bool
	// NoFullVM leaves the fullvm backend out even when its base image is
	// built.
	NoFullVM bool
	// FailAfter, for tests, fails the start-up right after the step of this
	// name (StepNames), to check that a partial start releases everything.
	FailAfter string
}

// Daemon is one running node: agent plus HTTP handler.
type Daemon struct {
	Manager *agent.Manager
	Driver  *container.Driver
	Network *netpolicy.Manager // sandboxes' egress policies
	Server  *v1.Server
	// E2B serves E2B's API (control plane and envd) on the same listener.
	E2B   *e2b.Handler
	Token string
	// Trajectories is the trajectory log (Config.TrajStore).
	Trajectories trajectory.Store
	// FnCall is the online-judge engine behind /v1/fncall (pools start on first use).
	FnCall *fncall.Engine
	// Layers talks to layerd (started on the first layered environment; it
	// outlives this process so running sandboxes keep their file systems).
	Layers *lazy.Client
	// Builder builds environments from Dockerfiles on this node.
	Builder *build.Builder
	cfg     Config
	mu      sync.Mutex
	servers []*httpkit.Server // Serve's, ServeSandboxFusion's and ServeMetrics's
	stack   *lifecycle.Stack
	obs     observability
	node    node
	nodeSvc nodeService
	// deleteAll, set by Shutdown, deletes every sandbox before the agent
	// closes (dsec server --cleanup-on-exit).
	deleteAll bool
	// Set by the steps for the steps after them.
	dirs     paths.Paths
	qosCfg   agent.QoSConfig
	drivers  *driver.Registry
	blobSpec string
	blobs    blob.Store
	puller   *pull.Puller
	envs     *envstore.Store
	uses     *envstore.Uses
	guard    *project.Guard
}

// New opens the node: it re-adopts the sandboxes recorded under DataDir. A
// failure at any step releases what the steps before it started.
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	d, steps, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx, steps, cfg.FailAfter); err != nil {
		return nil, err
	}
	return d, nil
}

// Open checks cfg and returns the node and the steps that start it (Start
// runs them), for a role that starts its own steps around the node's.
func Open(cfg Config) (*Daemon, []lifecycle.Step, error) {
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
	if cfg.E2BDomain != "" {
		if err := e2b.CheckDomain(cfg.E2BDomain); err != nil {
			return nil, nil, fmt.Errorf("--e2b-domain: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = slog.New(tracing.LogHandler(cfg.Logger.Handler())) // request IDs in every line
	if os.Geteuid() != 0 {
		return nil, nil, errors.New("dsec must run as root (it creates namespaces, cgroups and mounts)")
	}
	d := &Daemon{cfg: cfg, dirs: paths.New(cfg.DataDir)}
	return d, d.steps(), nil
}

// Start runs steps (Open's, with a role's around them); failAfter injects a
// failure after the step of that name (tests). Shutdown releases them.
func (d *Daemon) Start(ctx context.Context, steps []lifecycle.Step, failAfter string) error {
	st, err := lifecycle.Start(ctx, steps, lifecycle.Options{FailAfter: failAfter, Logger: d.cfg.Logger})
	if err != nil {
		return err
	}
	d.stack = st
	return nil
}

// StepNames names the node's start-up steps, in order.
func StepNames() []string { return lifecycle.Names((&Daemon{}).steps()) }

// steps is the node's start-up, in order; each step's Close releases what it
// started.
func (d *Daemon) steps() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "data-dir", Start: d.startDataDir},
		{Name: "tracing", Start: d.startTracing},
		{Name: "qos", Start: d.startQoS},
		{Name: "network", Start: d.startNetwork},
		{Name: "container", Start: d.startContainer},
		{Name: "environments", Start: d.startEnvironments},
		{Name: "backends", Start: d.startBackends},
		{Name: "agent", Start: d.startAgent},
		{Name: "layers", Start: d.startLayers},
		{Name: "env-uses", Start: d.startUses},
		{Name: "trajectories", Start: d.startTrajectories},
		{Name: "fncall", Start: d.startFnCall},
		{Name: "projects", Start: d.startProjects},
		{Name: "front-ends", Start: d.startFrontEnds},
		{Name: "node-metrics", Start: d.startNodeMetrics},
		{Name: "background", Start: d.startBackground},
	}
}

func (d *Daemon) startDataDir(context.Context) (lifecycle.Close, error) {
	raiseNoFile()
	if err := os.MkdirAll(d.cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := datafmt.CheckDir(d.cfg.DataDir, datafmt.NodeDir); err != nil {
		return nil, err
	}
	tok, err := loadToken(d.dirs.Token(), d.cfg.Token)
	d.Token = tok
	return nil, err
}

func (d *Daemon) startTracing(ctx context.Context) (lifecycle.Close, error) {
	obs, err := newObservability(ctx, d.cfg)
	if err != nil {
		return nil, err
	}
	d.obs = obs
	return obs.tracing.Shutdown, nil // flushes the exporter
}

func (d *Daemon) startQoS(context.Context) (lifecycle.Close, error) {
	q, qcfg, err := setupQoS(d.cfg.QoS, d.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	d.qosCfg = qcfg
	return func(context.Context) error { return q.close() }, nil
}

func (d *Daemon) startNetwork(context.Context) (lifecycle.Close, error) {
	netm, err := openNetwork(d.cfg)
	if err != nil {
		return nil, err
	}
	d.Network = netm
	return func(context.Context) error { return netm.Close() }, nil
}

func (d *Daemon) startContainer(context.Context) (lifecycle.Close, error) {
	var devs []container.Device
	for _, s := range d.cfg.Devices {
		dev, err := container.ParseDevice(s)
		if err != nil {
			return nil, fmt.Errorf("--device: %w", err)
		}
		devs = append(devs, dev)
	}
	drv, err := container.New(container.Config{StateDir: d.dirs.Containers(), Devices: devs,
		UserNS: d.cfg.UserNS, Logger: d.cfg.Logger, Network: d.Network, NoFavorDynMods: d.cfg.NoFavorDynMods,
		LSCPUWeight: d.cfg.QoS.LSCPUWeight, LSSlice: d.cfg.QoS.LSSlice, BESlice: d.cfg.QoS.BESlice})
	if err != nil {
		return nil, err
	}
	d.Driver = drv
	return func(context.Context) error { return drv.Close() }, nil
}

func (d *Daemon) startEnvironments(ctx context.Context) (lifecycle.Close, error) {
	if d.cfg.Layers.Root == "" {
		d.cfg.Layers.Root = d.dirs.Layers()
	}
	d.Layers = lazy.NewClient(d.cfg.Layers)
	d.blobSpec = d.dirs.BlobSpec(d.cfg.BlobStore)
	blobs, err := blob.Open(d.blobSpec, true)
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	d.blobs = blobs
	if d.cfg.ClusterEnvs != nil {
		d.envs = envstore.New(d.cfg.ClusterEnvs, blobs)
	} else if d.envs, err = envstore.Open(d.dirs.EnvStore(), blobs); err != nil {
		return nil, err
	}
	d.envs.Spec = d.blobSpec
	reg, err := registry.New(d.cfg.Registries)
	if err != nil {
		return nil, fmt.Errorf("registries: %w", err)
	}
	d.puller = &pull.Puller{Registry: reg, Blobs: blobs, Spec: d.blobSpec, Dir: d.dirs.Pulls(), Log: d.cfg.Logger,
		Budget: d.cfg.ImageCacheBytes, Grace: imageCacheGrace, Claims: d.cfg.LayerClaims, SharedBlobs: d.cfg.BlobStore != ""}
	if d.puller.SharedBlobs && d.puller.Budget > 0 {
		// Deleting blobs of a store other nodes read is not this node's call.
		d.cfg.Logger.Info("image cache budget off: the blob store is not this node's own", "blob_store", d.cfg.BlobStore)
		d.puller.Budget = 0
	}
	if gc := d.cfg.BlobGC; gc != nil {
		gc.Blobs, gc.Log = blobs, d.cfg.Logger
		if gc.Grace == 0 {
			gc.Grace = imageCacheGrace
		}
		d.puller.GC = gc
	}
	return nil, d.puller.Clean(ctx)
}

func (d *Daemon) startBackends(context.Context) (lifecycle.Close, error) {
	drivers, stop, err := registerDrivers(d.cfg, d.Driver)
	d.drivers = drivers
	return stop, err
}

func (d *Daemon) startAgent(ctx context.Context) (lifecycle.Close, error) {
	cfg := d.cfg
	packer := &commit.Packer{Blobs: d.blobs, Envs: d.envs, TempDir: d.dirs.Commits()}
	images := &image.Store{Dir: cfg.ImagesDir, Default: cfg.DefaultImage, BlobStore: d.blobSpec,
		Layers: lazy.Mounter{Client: d.Layers, Prefetch: cfg.LayerPrefetch},
		Envs:   envstore.Images{Store: d.envs, DefaultSpec: d.blobSpec},
		Refs:   d.puller}
	mgr, err := agent.New(ctx, agent.Config{
		DataDir: cfg.DataDir, Driver: d.Driver, Drivers: d.drivers, Logger: cfg.Logger, MaxSandboxes: cfg.MaxSandboxes, Node: cfg.NodeName,
		WarmPool: cfg.WarmPool, MaxLogBytes: cfg.MaxLogBytes, QoS: d.qosCfg, Tracer: d.obs.tracing, Observer: d.obs.metrics,
		MaxFork: cfg.MaxFork, Packer: packer, Images: images,
	})
	if err != nil {
		return nil, err
	}
	d.Manager = mgr
	d.Builder = &build.Builder{Sandboxes: mgr, Envs: d.envs, Resolve: images.ResolveContext, BlobLayers: packer.BlobLayers,
		TempDir: d.dirs.Commits(), Log: cfg.Logger,
		CacheBudget: cfg.BuildCacheBytes, CacheDir: d.dirs.BuildCache(), HeldBlobs: d.pulledBlobs, LayersInUse: mgr.LayerDigestsInUse,
		SharedBlobs: cfg.BlobStore != ""}
	if d.Builder.SharedBlobs && d.Builder.CacheBudget > 0 {
		// Deleting blobs of a store other nodes read is not this node's call.
		cfg.Logger.Info("build cache budget off: the blob store is not this node's own", "blob_store", cfg.BlobStore)
		d.Builder.CacheBudget = 0
	}
	d.envs.InUse = mgr.ImageInUse
	d.puller.InUse = func(context.Context) (map[string][]string, error) { return mgr.ImageDigestsInUse(), nil }
	if gc := d.cfg.BlobGC; gc != nil {
		if gc.Node == "" {
			gc.Node = mgr.Node()
		}
		if err := gc.Load(ctx); err != nil {
			mgr.Close()
			return nil, err
		}
	}
	return func(context.Context) error { return mgr.Close() }, nil
}

// startLayers registers what runs before the agent closes: the sandboxes'
// deletion when Shutdown asks for it, then layerd's stop when no sandbox is
// left.
func (d *Daemon) startLayers(context.Context) (lifecycle.Close, error) {
	return func(ctx context.Context) error {
		var errs []error
		if d.deleteAll {
			errs = append(errs, d.Manager.DeleteAll(ctx))
		}
		return errors.Join(append(errs, d.stopLayersIfIdle(ctx))...)
	}, nil
}

func (d *Daemon) startUses(ctx context.Context) (lifecycle.Close, error) {
	if d.cfg.ClusterEnvs == nil {
		return nil, nil
	}
	d.uses = &envstore.Uses{State: d.cfg.ClusterEnvs, Node: d.Manager.Node(), InUse: d.Manager.ImageInUse, Logger: d.cfg.Logger}
	return nil, d.uses.Load(ctx)
}

func (d *Daemon) startTrajectories(ctx context.Context) (lifecycle.Close, error) {
	traj, err := trajectory.OpenNode(ctx, d.cfg.DataDir, d.cfg.TrajStore, d.cfg.Logger)
	if err != nil {
		return nil, err
	}
	d.Trajectories = traj
	return func(context.Context) error { return traj.Close() }, nil
}

func (d *Daemon) startFnCall(context.Context) (lifecycle.Close, error) {
	fc, err := fncall.New(fncall.Config{
		StateDir: d.dirs.FnCall(), Logger: d.cfg.Logger,
		Images: &image.Store{Dir: d.cfg.ImagesDir, Default: fncall.DefaultImage},
	})
	if err != nil {
		return nil, err
	}
	d.FnCall = fc
	d.node = node{Manager: d.Manager, fc: fc, envs: d.envs, puller: d.puller, builder: d.Builder, scratch: d.dirs.Commits(), layers: d.Layers, uses: d.uses, noFnCall: d.cfg.NoFnCall, imagesDir: d.cfg.ImagesDir}
	if d.node.gpu, err = hasGPU(d.cfg.GPU, d.cfg.GPUDevDir); err != nil {
		return nil, err
	}
	if d.cfg.MaxFnCalls > 0 {
		d.node.fnSlots = make(chan struct{}, d.cfg.MaxFnCalls)
	}
	return func(context.Context) error { return fc.Close() }, nil
}

// startProjects opens projects and quotas: the same Guard as an API
// server's, over a store in DATA_DIR/projects.json; reservations are rebuilt
// from the sandboxes now.
func (d *Daemon) startProjects(ctx context.Context) (lifecycle.Close, error) {
	projects, err := project.OpenLocal(filepath.Join(d.cfg.DataDir, "projects.json"), d.Token)
	if err != nil {
		return nil, err
	}
	d.guard = project.NewGuard(d.node, projects, d.cfg.Logger)
	if err := d.guard.Reconcile(ctx); err != nil {
		d.cfg.Logger.Warn("quota: counting the sandboxes of projects with quotas", "err", err)
	}
	return nil, nil
}

func (d *Daemon) startFrontEnds(ctx context.Context) (lifecycle.Close, error) {
	svc, nsvc := d.services()
	d.nodeSvc = nsvc
	opts := v1.Options{Projects: d.guard, Logger: d.cfg.Logger, Steps: true, KeepAlive: d.cfg.KeepAlive}
	d.Server = v1.New(svc, opts)
	d.E2B = e2b.New(svc, e2b.Options{Authorize: auth.NewToken(d.Token).Match, Secret: []byte(d.Token), Logger: d.cfg.Logger,
		Domain: d.cfg.E2BDomain})
	return func(context.Context) error { return d.E2B.Close() }, nil
}

// services composes the node's session interceptors: every front end calls
// the node through the request validation (session.Validating: a malformed
// request goes no further), the trajectory log, metrics (a replayed step runs
// nothing: no exec) and the project guard. A cluster node's service
// (NodeService) logs and replays the steps that reach it over the node RPC
// in the node's own trajectory store, next to the sandboxes: the same chain
// without the validation (the API tier validated each request) and the guard
// (quotas are the API tier's).
func (d *Daemon) services() (session.Service, nodeService) {
	tlog := trajectory.Interceptor(d.Trajectories, trajectory.Options{Logger: d.cfg.Logger, OnStep: d.obs.metrics.TrajectoryStep})
	svc := session.Chain(d.node, session.Validating(nil), tlog, d.obs.metrics.Interceptor(d.obs.tracing), d.guard.Interceptor())
	d.obs.svc = svc
	nsvc := nodeService{Service: session.Chain(d.node, tlog, d.obs.metrics.Interceptor(d.obs.tracing)), node: d.node}
	return svc, nsvc
}

func (d *Daemon) startNodeMetrics(context.Context) (lifecycle.Close, error) {
	nc := d.obs.metrics.NewNodeCollector(nodeSandboxes{d.Manager}, layerStats{d.Layers}, fnCallPools{d.FnCall})
	if err := d.obs.metrics.Register(nc); err != nil {
		return nil, err
	}
	return lifecycle.Go(nc.Run), nil
}

// startBackground starts the trajectory retention, the quota reconciler and,
// on a cluster node, the environments' in-use marks.
func (d *Daemon) startBackground(context.Context) (lifecycle.Close, error) {
	stops := []lifecycle.Close{
		lifecycle.Go(d.pruneLoop),
		lifecycle.Go(func(ctx context.Context) { d.guard.Run(ctx, 30*time.Second) }),
	}
	if d.uses != nil {
		stops = append(stops, lifecycle.Go(func(ctx context.Context) { d.uses.Run(ctx, usesSyncInterval, d.node.usedEnvs) }))
	}
	if gc := d.cfg.BlobGC; gc != nil {
		inUse := func() map[string]bool { return d.puller.WithIndexes(d.Manager.LayerDigestsInUse()) }
		stops = append(stops, lifecycle.Go(func(ctx context.Context) { gc.Run(ctx, usesSyncInterval, blobEvictInterval, inUse) }))
	}
	return func(ctx context.Context) error {
		for _, stop := range stops {
			_ = stop(ctx)
		}
		return nil
	}, nil
}

// registerDrivers is the node's backends: container (the default) and,
// when the guest kernel is installed (scripts/setup.sh), microvm, whose KVM
// probe (once per host boot, cached in /run) runs in the background; the
// returned Close waits for it (not canceling it: a canceled probe would be
// cached as a failed one), so no probe VM outlives the node.
func registerDrivers(cfg Config, drv *container.Driver) (*driver.Registry, lifecycle.Close, error) {
	all := []driver.Driver{drv}
	var stop lifecycle.Close
	if !cfg.NoMicroVM {
		vm, err := microvm.New(microvm.Config{StateDir: filepath.Join(cfg.DataDir, "microvm"), Logger: cfg.Logger,
			NoSnapshots: cfg.NoVMSnapshots})
		if err != nil {
			cfg.Logger.Warn("microvm backend not available", "err", err)
		} else {
			all = append(all, vm)
			done := make(chan struct{})
			go func() { defer close(done); vm.Accel(context.Background()) }()
			stop = func(context.Context) error { <-done; return nil }
		}
	}
	if !cfg.NoFullVM {
		all = append(all, fullVMDriver(cfg)...)
	}
	reg, err := driver.NewRegistry(all...)
	return reg, stop, err
}

// pruneLoop applies the trajectory retention limits at start and every 10
// minutes, until ctx ends.
func (d *Daemon) pruneLoop(ctx context.Context) {
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
		if n, err := d.Trajectories.Prune(context.WithoutCancel(ctx), cutoff, max(0, maxN)); err != nil {
			d.cfg.Logger.Error("pruning trajectories", "err", err)
		} else if n > 0 {
			d.cfg.Logger.Info("pruned trajectories", "deleted", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Serve serves the API on l until Shutdown.
func (d *Daemon) Serve(l net.Listener) error { return d.serveOn(l, d.observe(d.mainHandler())) }

// serveOn serves h on l until Shutdown.
func (d *Daemon) serveOn(l net.Listener, h http.Handler) error {
	srv := httpkit.NewServer(h)
	d.mu.Lock()
	d.servers = append(d.servers, srv)
	d.mu.Unlock()
	return srv.Serve(l)
}

// mainHandler is the API listener's: Handler with E2B's routes.
func (d *Daemon) mainHandler() http.Handler { return e2b.Mount(d.Handler(), d.E2B) }

// Shutdown stops serving and releases what the start-up steps started, in
// reverse order; sandboxes keep running unless deleteAll is set.
func (d *Daemon) Shutdown(ctx context.Context, deleteAll bool) error {
	var errs []error
	d.mu.Lock()
	servers := d.servers
	d.mu.Unlock()
	for _, srv := range servers {
		errs = append(errs, srv.Shutdown(ctx))
	}
	d.deleteAll = deleteAll
	errs = append(errs, d.stack.Close(ctx))
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
	puller *pull.Puller
	layers *lazy.Client
	// builder runs Dockerfile builds; scratch holds their unpacked contexts.
	builder *build.Builder
	scratch string
	// uses marks the environments in use in the cluster's etcd (nil: one
	// machine, where envs.InUse asks the agent).
	uses *envstore.Uses
	// fnSlots bounds the FnCalls in flight (nil: unbounded); noFnCall refuses
	// them all.
	fnSlots   chan struct{}
	noFnCall  bool
	imagesDir string
	// gpu: the node advertises a GPU and takes FnCalls of device "gpu".
	gpu bool
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
