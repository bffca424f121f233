// Package agent is dsec's node agent: it owns the sandboxes of one node, keeps their
// records on local disk, re-adopts them when it restarts (even after kill -9),
// expires them by TTL and idleness, and serves their session operations (exec,
// background processes, files, dial, terminals) on top of a registry of backend
// drivers: a create goes to the driver its backend names, a record back to its own
// driver when the agent re-adopts it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/hostfeat"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Defaults for sandbox limits when a request leaves them out.
const (
	DefaultCPU     = 1.0
	DefaultMemory  = 512 << 20
	DefaultDisk    = 1 << 30
	DefaultPidsMax = 1024
)

// Config configures a Manager.
type Config struct {
	// DataDir keeps the agent's records (DataDir/sandboxes/ID.json).
	DataDir string
	// Drivers are the backends, by name; a create picks one by its Backend
	// (empty: the registry's default) and a record goes back to its own on
	// recovery.
	Drivers *driver.Registry
	// Driver is shorthand for a registry of this one driver.
	Driver driver.Driver
	Images *image.Store
	// Node is this node's name, encoded in every sandbox ID it creates (see
	// session.NewID); default: the host name made valid (session.NodeNameFrom).
	Node string
	// MaxSandboxes bounds how many sandboxes this node admits (0 = 100,000).
	MaxSandboxes int
	// MaxCreating bounds concurrent creates; more wait (0 = 64).
	MaxCreating int
	// MaxLogBytes caps each background process log on disk (stdout and
	// stderr each; 0 = DefaultMaxLogBytes), see logcap.go.
	MaxLogBytes int64
	// MaxFork bounds the children of one fork (0 = DefaultMaxFork).
	MaxFork int
	// Packer builds committed environments (internal/image/commit); nil: commit is
	// not available on this node.
	Packer EnvPacker
	Logger *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// QoS configures CPU classes and memory reclaim (see qos.go).
	QoS QoSConfig
	// WarmPool keeps this many sandboxes started ahead of the creates that
	// take them (0: none); see warm.go.
	WarmPool int
	// Tracer makes the spans of creates and execs (nil: none); Observer
	// learns phase timings and reclaimed bytes (nil: nobody). See observe.go.
	Tracer   trace.TracerProvider
	Observer Observer
}

// Sweeper is implemented by drivers that can release leftovers not in keep.
type Sweeper interface {
	Sweep(ctx context.Context, keep map[string]bool)
}

// Manager is the node agent; it implements session.Service.
type Manager struct {
	// Unimplemented answers the groups a node agent does not serve (FnCall,
	// trajectories, nodes, projects, composing images: other parts of a node).
	session.Unimplemented
	cfg     Config
	drivers *driver.Registry
	log     *slog.Logger
	recs    string // records dir
	now     func() time.Time
	slots   *semaphore.Weighted // bounds concurrent creates
	newID   func() string
	tracer  trace.Tracer

	mu        sync.RWMutex
	sandboxes map[string]*sandbox
	admitting int                 // places reserved by creates in flight (admission.go)
	byRequest map[string]*pending // request ID → create in flight or done
	forking   map[string]int      // fork snapshot dir → forks still creating children (fork.go)
	pulls     map[string]*pulling // placeholders of creates fetching their image (pulling.go)
	// dying are deleted sandboxes whose teardown still runs (teardown.go):
	// their layers and fork copies stay in use until it ends.
	dying map[string]*sandbox

	stop chan struct{}
	wg   sync.WaitGroup

	warm     *warmPool    // nil: no warm pool (warm.go)
	creating atomic.Int64 // Creates in flight; the warm pool fills only at 0
	lastOp   atomic.Int64 // when a create, delete or exec last began or ended (UnixNano)

	idle idleReclaim // see qos.go
	logs logNotifier // wakes FollowProcess (follow.go)
}

// pending de-duplicates concurrent creates that carry the same request ID.
type pending struct {
	done chan struct{}
	id   string
	err  error
}

// New starts a Manager: it re-adopts the sandboxes recorded in DataDir, releases
// leftovers, and starts the expiry loop.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if (cfg.Driver == nil && cfg.Drivers == nil) || cfg.Images == nil || cfg.DataDir == "" {
		return nil, errors.New("agent: Drivers (or Driver), Images and DataDir are required")
	}
	if cfg.Drivers == nil {
		r, err := driver.NewRegistry(cfg.Driver)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		cfg.Drivers = r
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxSandboxes == 0 {
		cfg.MaxSandboxes = 100_000
	}
	if cfg.WarmPool < 0 {
		return nil, fmt.Errorf("agent: the warm pool's size must be 0 or more, got %d", cfg.WarmPool)
	}
	if cfg.MaxCreating == 0 {
		cfg.MaxCreating = 64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Node == "" {
		host, _ := os.Hostname()
		cfg.Node = session.NodeNameFrom(host)
	}
	if err := session.CheckNodeName(cfg.Node); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	m := &Manager{
		cfg: cfg, drivers: cfg.Drivers, log: cfg.Logger, now: cfg.Now, tracer: tracerOf(cfg.Tracer),
		recs:      paths.New(cfg.DataDir).Sandboxes(),
		slots:     semaphore.NewWeighted(int64(cfg.MaxCreating)),
		sandboxes: map[string]*sandbox{},
		byRequest: map[string]*pending{},
		forking:   map[string]int{},
		pulls:     map[string]*pulling{},
		dying:     map[string]*sandbox{},
		stop:      make(chan struct{}),
	}
	m.newID = func() string { return session.NewID(cfg.Node) }
	if err := os.MkdirAll(m.recs, 0o700); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := prepareLogRoot(paths.New(cfg.DataDir).Logs("")); err != nil {
		return nil, fmt.Errorf("agent: process log directory: %w", err)
	}
	if err := m.adopt(ctx); err != nil {
		return nil, err
	}
	m.resumePulling(ctx)
	m.gcForks()
	m.wg.Add(1)
	go m.expiryLoop()
	m.startIdleReclaim()
	if m.warm = newWarmPool(cfg.WarmPool); m.warm != nil {
		m.wg.Add(1)
		go m.warmLoop()
		m.warm.wake()
	}
	return m, nil
}

// adopt loads every record and re-attaches to its sandbox.
func (m *Manager) adopt(ctx context.Context) error {
	recs, held, err := loadRecords(m.recs)
	if err != nil {
		return fmt.Errorf("agent: load records: %w", err)
	}
	keep := map[string]bool{}
	keepBy := map[string]map[string]bool{} // backend → its sandboxes
	for id, why := range held {
		// Whatever runs under such a record is left alone, on every backend.
		m.log.Error("sandbox record this dsec cannot read; leaving it and its sandbox as they are", "id", id, "err", why)
		keep[id] = true
		for _, drv := range m.drivers.All() {
			if keepBy[drv.Name()] == nil {
				keepBy[drv.Name()] = map[string]bool{}
			}
			keepBy[drv.Name()][id] = true
		}
	}
	for _, r := range recs {
		if r.Backend == "" {
			r.Backend = api.BackendContainer // records from before backends were recorded
		}
		drv, err := m.drivers.Get(r.Backend)
		if err != nil {
			// Not this configuration's backend: leave the record for an agent
			// that has it.
			m.log.Warn("sandbox of a backend this agent does not run; leaving it", "id", r.ID, "backend", r.Backend)
			keep[r.ID] = true
			continue
		}
		var inst driver.Instance = stoppedInstance{id: r.ID, done: make(chan struct{})}
		if !r.Stopped {
			inst, err = drv.Recover(ctx, r.Spec, r.DriverState)
		}
		if err != nil {
			m.log.Warn("sandbox lost while the agent was down; releasing it", "id", r.ID, "err", err)
			_ = drv.Cleanup(ctx, r.Spec, r.DriverState)
			_ = removeRecord(m.recs, r.ID)
			continue
		}
		if keepBy[r.Backend] == nil {
			keepBy[r.Backend] = map[string]bool{}
		}
		keepBy[r.Backend][r.ID] = true
		journaled := m.mergeProcJournal(r)
		sb := newSandbox(m, drv, r, inst)
		sb.journaled = journaled
		m.sandboxes[r.ID] = sb
		if r.RequestID != "" {
			m.byRequest[r.RequestID] = donePending(r.ID)
		}
		keep[r.ID] = true
		if r.Paused {
			sb.reattachPending = !r.Stopped
		} else {
			sb.reattachProcs()
		}
		m.log.Info("re-adopted sandbox", "id", r.ID)
	}
	for _, drv := range m.drivers.All() {
		if sw, ok := drv.(Sweeper); ok {
			sw.Sweep(ctx, keepBy[drv.Name()])
		}
	}
	m.sweepLogs(keep)
	if m.cfg.Images.Layers != nil {
		// Layer holders of sandboxes that vanished while the agent was down, or of
		// creates interrupted between acquire and record, are dropped.
		ids := make([]string, 0, len(keep))
		for id := range keep {
			ids = append(ids, id)
		}
		if err := m.cfg.Images.Layers.Sync(ctx, ids); err != nil {
			m.log.Warn("sync layer holders", "err", err)
		}
	}
	return nil
}

func donePending(id string) *pending {
	p := &pending{done: make(chan struct{}), id: id}
	close(p.done)
	return p
}

// Close stops background work and detaches from the background processes.
// Sandboxes keep running: a restarted agent re-adopts them. Use DeleteAll to
// tear them down.
func (m *Manager) Close() error {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.stopPulling()
	m.wg.Wait()
	m.closeWarm()
	m.WaitTeardowns()
	for _, sb := range m.all() {
		sb.detachProcs()
	}
	m.logs.close()
	return nil
}

// DeleteAll destroys every sandbox, and stops the creates still fetching
// their image (tests, benchmarks, `dsec server --cleanup`).
func (m *Manager) DeleteAll(ctx context.Context) error {
	m.mu.RLock()
	ids := make([]string, 0, len(m.sandboxes)+len(m.pulls))
	for id := range m.sandboxes {
		ids = append(ids, id)
	}
	for id := range m.pulls {
		if m.sandboxes[id] == nil {
			ids = append(ids, id)
		}
	}
	m.mu.RUnlock()
	var errs []error
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(8)
	for _, id := range ids {
		g.Go(func() error {
			if err := m.Delete(ctx, id); err != nil && !errdefs.Is(err, api.CodeNotFound) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil // every delete is tried; all errors are reported
		})
	}
	_ = g.Wait()
	m.WaitTeardowns()
	return errors.Join(errs...)
}

// Info implements session.Service.
func (m *Manager) Info(ctx context.Context) (api.Info, error) {
	info := api.Info{Version: Version, Node: m.cfg.Node, Backends: m.drivers.Names(), Images: m.cfg.Images.List()}
	for _, drv := range m.drivers.All() {
		if v, ok := drv.(interface{ CgroupVersion() int }); ok {
			info.Cgroup = fmt.Sprintf("v%d", v.CgroupVersion())
			break
		}
	}
	info.QoS = m.qosInfo()
	info.Host = hostfeat.Local().Probe()
	info.Capabilities = make(map[string][]string)
	for _, drv := range m.drivers.All() {
		info.Capabilities[drv.Name()] = capabilities(drv.Capabilities())
	}
	info = session.WithServices(info, api.ServiceImages)
	for _, drv := range m.drivers.All() {
		if v, ok := drv.(interface {
			VMInfo(context.Context) *api.VMInfo
		}); ok {
			info.VM = v.VMInfo(ctx)
		}
	}
	return info, nil
}

// capabilities is c as Info reports it (api.Cap*).
func capabilities(c driver.Capabilities) []string {
	out := []string{}
	for _, f := range []struct {
		on   bool
		name string
	}{{c.Pause, api.CapPause}, {c.Fork, api.CapFork}, {c.Fork, api.CapPauseFilesystem}, {c.Commit, api.CapCommit},
		{c.Screenshot, api.CapScreenshot}, {c.Input, api.CapInput}, {c.TTY, api.CapTTY}} {
		if f.on {
			out = append(out, f.name)
		}
	}
	return out
}

// Node returns this node's name (the one its sandbox IDs carry).
func (m *Manager) Node() string { return m.cfg.Node }

// Version is the dsec version reported by the API.
const Version = "0.1.0"

func (m *Manager) get(id string) (*sandbox, error) {
	m.mu.RLock()
	sb, p := m.sandboxes[id], m.pulls[id]
	m.mu.RUnlock()
	if sb == nil && p != nil {
		return nil, pullingErr(p)
	}
	if sb == nil {
		return nil, errdefs.NotFound("sandbox %q not found", id)
	}
	return sb, nil
}

// all snapshots the sandbox table. Lock order: never take a sandbox's mutex
// while holding m.mu (Delete holds the sandbox's and then takes m.mu).
func (m *Manager) all() []*sandbox {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		out = append(out, sb)
	}
	return out
}

// Count returns the number of sandboxes.
func (m *Manager) Count() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.sandboxes)
}

// List implements session.Service.
func (m *Manager) List(ctx context.Context) ([]api.Sandbox, error) {
	all := m.all()
	out := make([]api.Sandbox, 0, len(all))
	for _, sb := range all {
		out = append(out, sb.view())
	}
	out = append(out, m.pullingViews()...)
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Get implements session.Service.
func (m *Manager) Get(ctx context.Context, id string) (api.Sandbox, error) {
	if p := m.pullingOf(id); p != nil {
		m.mu.RLock()
		sb := m.sandboxes[id]
		m.mu.RUnlock()
		if sb != nil { // made a moment ago
			return sb.view(), nil
		}
		return m.pullingView(p), nil
	}
	sb, err := m.get(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	return sb.view(), nil
}

// ImageLower resolves an image name ("" = default) the way Create does.
func (m *Manager) ImageLower(name string) (image.Image, error) { return m.cfg.Images.Resolve(name) }
