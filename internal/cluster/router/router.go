package router

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/pkg/api"
)

// NodeView is the router's view of the cluster's nodes (a cluster.Watcher).
type NodeView interface {
	Node(name string) (cluster.NodeStatus, bool)
	Nodes() []cluster.NodeStatus
	// Lost is closed when the node is lost (nil: never).
	Lost(name string) <-chan struct{}
}

// Claims maps create request IDs to nodes across API servers (cluster.Requests).
type Claims interface {
	Lookup(ctx context.Context, id string) (node string, ok bool, err error)
	Claim(ctx context.Context, id, node string) (string, error)
	Move(ctx context.Context, id, from, to string) (string, error)
	Drop(ctx context.Context, id, node string)
}

// Dialer returns the session service of a node (a noderpc client of its
// address). The router caches it per node and address.
type Dialer func(n cluster.NodeStatus) session.Service

// Config configures a Router.
type Config struct {
	Nodes  NodeView
	Engine *placement.Engine
	// EnvLayers returns the layer digests of environment name (nil for none:
	// a directory image, an unknown name), for image locality (placement
	// prefers, among equally loaded nodes, those that mount them); nil: no
	// locality.
	EnvLayers func(ctx context.Context, name string) []string
	// FnCalls places FnCalls on the nodes serving them (over FnCallSource);
	// nil: any ready node.
	FnCalls *placement.Engine
	Dial    Dialer
	// Claims makes request IDs cluster-wide; nil: only the node deduplicates
	// (a retry placed on another node would create a second sandbox).
	Claims Claims
	// Drainer serves drain and undrain (nil: refused).
	Drainer Drainer
	// Observer is told about placements, rejections and re-placements
	// (metrics.Cluster); nil: nobody.
	Observer Observer
	// Tracer makes the "placement" span of each create; nil: none.
	Tracer trace.TracerProvider
	Logger *slog.Logger
}

// Router is the cluster's session.Service (see the package doc): it forwards
// each sandbox's calls to its owning node, places creates (one or a batch) and
// FnCalls, and serves the nodes and trajectory groups across the nodes.
type Router struct {
	// Unimplemented answers the groups a router does not serve (projects: the
	// guard above it; composing images: Cluster).
	session.Unimplemented
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer
	traced bool // tracer may record: placement spans are made (tracing.Recording)

	mu      sync.Mutex
	clients map[string]nodeClient
}

type nodeClient struct {
	addr string
	svc  session.Service
}

var _ session.Service = (*Router)(nil)

// New returns a router.
func New(cfg Config) *Router {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	tp := cfg.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Router{cfg: cfg, log: cfg.Logger, tracer: tp.Tracer("github.com/dsec-dev/dsec/internal/apiserver"),
		traced: tracing.Recording(tp), clients: map[string]nodeClient{}}
}

// client returns node n's service, dialling (or re-dialling after an address
// change) as needed.
func (r *Router) client(n cluster.NodeStatus) session.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clients[n.Name]
	if ok && c.addr == n.Addr {
		return c.svc
	}
	if ok {
		if cl, isCloser := c.svc.(io.Closer); isCloser {
			_ = cl.Close()
		}
	}
	c = nodeClient{addr: n.Addr, svc: r.cfg.Dial(n)}
	r.clients[n.Name] = c
	return c.svc
}

// Close closes the node clients.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, c := range r.clients {
		if cl, ok := c.svc.(io.Closer); ok {
			_ = cl.Close()
		}
		delete(r.clients, name)
	}
	return nil
}

// envLayers is Config.EnvLayers, nil without one or for the default
// image.
func (r *Router) envLayers(ctx context.Context, image string) []string {
	if r.cfg.EnvLayers == nil || image == "" {
		return nil
	}
	return r.cfg.EnvLayers(ctx, image)
}

// nodeFor returns the service of the node named name, or why it cannot serve:
// not_found for a node the cluster never had, node_lost for one whose lease
// expired.
func (r *Router) nodeFor(name, what string) (session.Service, error) {
	n, ok := r.cfg.Nodes.Node(name)
	if !ok {
		return nil, errdefs.NotFound("%s: node %q is not in the cluster", what, name)
	}
	if n.State == placement.StateLost {
		return nil, errdefs.New(api.CodeNodeLost, "%s: node %q is lost (its lease expired; last report %s); its sandboxes answer again when it is back",
			what, name, n.ReportedAt.UTC().Format("15:04:05"))
	}
	return r.client(n), nil
}

// route returns the service of the node sandbox id names.
func (r *Router) route(id string) (session.Service, error) {
	node, ok := session.NodeOf(id)
	if !ok {
		return nil, errdefs.NotFound("sandbox %q: not a cluster sandbox ID (sb-HEX.NODE)", id)
	}
	return r.nodeFor(node, "sandbox "+id)
}

// on runs f on the service owning sandbox id. Use it for calls that return an
// open stream (FS, logs, a connection); calls that block until they are done
// use blocking.
func on[T any](r *Router, id string, f func(session.Service) (T, error)) (T, error) {
	svc, err := r.route(id)
	if err != nil {
		var zero T
		return zero, err
	}
	return f(svc)
}

// blocking runs f on the service owning sandbox id and ends it with node_lost
// when the node is lost meanwhile (a node cut off from the network would
// otherwise hold the call until the RPC's keepalive gives up).
func blocking[T any](ctx context.Context, r *Router, id string, f func(context.Context, session.Service) (T, error)) (T, error) {
	svc, err := r.route(id)
	if err != nil {
		var zero T
		return zero, err
	}
	node, _ := session.NodeOf(id)
	lost := r.cfg.Nodes.Lost(node)
	if lost == nil {
		return f(ctx, svc)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-lost:
			cancel(errdefs.New(api.CodeNodeLost, "sandbox %s: node %q was lost while the call ran (its lease expired); its sandboxes answer again when it is back", id, node))
		case <-cctx.Done():
		}
	}()
	v, err := f(cctx, svc)
	if cause := context.Cause(cctx); err != nil && errdefs.Is(cause, api.CodeNodeLost) {
		return v, cause
	}
	return v, err
}

func (r *Router) Get(ctx context.Context, id string) (api.Sandbox, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.Sandbox, error) { return s.Get(ctx, id) })
}

func (r *Router) Delete(ctx context.Context, id string) error {
	_, err := blocking(ctx, r, id, func(ctx context.Context, s session.Service) (struct{}, error) { return struct{}{}, s.Delete(ctx, id) })
	return err
}

func (r *Router) Pause(ctx context.Context, id string) (api.Sandbox, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.Sandbox, error) { return s.Pause(ctx, id) })
}

func (r *Router) Resume(ctx context.Context, id string) (api.Sandbox, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.Sandbox, error) { return s.Resume(ctx, id) })
}

func (r *Router) Reset(ctx context.Context, id string) (api.Sandbox, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.Sandbox, error) { return s.Reset(ctx, id) })
}

func (r *Router) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.ExecResult, error) { return s.Exec(ctx, id, req) })
}

func (r *Router) ExecStream(ctx context.Context, id string, req api.ExecRequest, st session.Stream) (api.ExecResult, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.ExecResult, error) {
		return s.ExecStream(ctx, id, req, st)
	})
}

func (r *Router) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.Process, error) { return s.StartProcess(ctx, id, req) })
}

func (r *Router) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) ([]api.Process, error) { return s.ListProcesses(ctx, id) })
}

func (r *Router) GetProcess(ctx context.Context, id, procID string) (api.Process, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.Process, error) {
		return s.GetProcess(ctx, id, procID)
	})
}

func (r *Router) WaitProcess(ctx context.Context, id, procID string) (api.Process, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.Process, error) {
		return s.WaitProcess(ctx, id, procID)
	})
}

func (r *Router) SendProcessInput(ctx context.Context, id, procID string, in api.ProcessInput) error {
	_, err := blocking(ctx, r, id, func(ctx context.Context, s session.Service) (struct{}, error) {
		return struct{}{}, s.SendProcessInput(ctx, id, procID, in)
	})
	return err
}

func (r *Router) KillProcess(ctx context.Context, id, procID string, sig int) error {
	_, err := blocking(ctx, r, id, func(ctx context.Context, s session.Service) (struct{}, error) {
		return struct{}{}, s.KillProcess(ctx, id, procID, sig)
	})
	return err
}

func (r *Router) FollowProcess(ctx context.Context, id, procID string, req api.FollowRequest) (api.ProcessOutput, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (api.ProcessOutput, error) {
		return s.FollowProcess(ctx, id, procID, req)
	})
}

func (r *Router) ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	return on(r, id, func(s session.Service) (io.ReadCloser, error) { return s.ProcessLogs(ctx, id, procID, stream, offset) })
}

func (r *Router) FS(ctx context.Context, id string) (session.FS, error) {
	return on(r, id, func(s session.Service) (session.FS, error) { return s.FS(ctx, id) })
}

func (r *Router) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	return on(r, id, func(s session.Service) (net.Conn, error) { return s.Dial(ctx, id, port) })
}

// Fork: the children live on the parent's node.
func (r *Router) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	return on(r, id, func(s session.Service) (api.ForkResult, error) { return s.Fork(ctx, id, req) })
}

func (r *Router) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	return on(r, id, func(s session.Service) (api.CommitResult, error) { return s.Commit(ctx, id, req) })
}

func (r *Router) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error) {
	return on(r, id, func(s session.Service) (api.Sandbox, error) { return s.SetNetwork(ctx, id, p) })
}

func (r *Router) PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error) {
	return on(r, id, func(s session.Service) (api.PauseResponse, error) { return s.PauseWith(ctx, id, req) })
}

func (r *Router) CreateWatch(ctx context.Context, id string, req api.WatchRequest) (api.Watch, error) {
	return on(r, id, func(s session.Service) (api.Watch, error) { return s.CreateWatch(ctx, id, req) })
}

func (r *Router) WatchEvents(ctx context.Context, id, watchID string) ([]api.WatchEvent, error) {
	return on(r, id, func(s session.Service) ([]api.WatchEvent, error) { return s.WatchEvents(ctx, id, watchID) })
}

func (r *Router) RemoveWatch(ctx context.Context, id, watchID string) error {
	_, err := on(r, id, func(s session.Service) (struct{}, error) { return struct{}{}, s.RemoveWatch(ctx, id, watchID) })
	return err
}

func (r *Router) SetDeadline(ctx context.Context, id string, req api.DeadlineRequest) (api.Sandbox, error) {
	return on(r, id, func(s session.Service) (api.Sandbox, error) { return s.SetDeadline(ctx, id, req) })
}

func (r *Router) SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error) {
	return on(r, id, func(s session.Service) (api.Sandbox, error) { return s.SetCPUClass(ctx, id, class) })
}

// Screenshot: the owning node's display.
func (r *Router) UsageHistory(ctx context.Context, id string, req api.UsageHistoryRequest) ([]api.UsageSample, error) {
	return on(r, id, func(s session.Service) ([]api.UsageSample, error) { return s.UsageHistory(ctx, id, req) })
}

func (r *Router) Screenshot(ctx context.Context, id string) ([]byte, error) {
	return on(r, id, func(s session.Service) ([]byte, error) { return s.Screenshot(ctx, id) })
}

func (r *Router) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	return on(r, id, func(s session.Service) (api.InputResult, error) { return s.SendInput(ctx, id, req) })
}

// HTTP: a trajectory-tagged proxy request goes to
// the sandbox's node, whose trajectory decorator logs or replays it.
func (r *Router) HTTP(ctx context.Context, id string, port int, req session.HTTPRequest) (session.HTTPResponse, error) {
	return blocking(ctx, r, id, func(ctx context.Context, s session.Service) (session.HTTPResponse, error) {
		return s.HTTP(ctx, id, port, req)
	})
}
