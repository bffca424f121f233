package noderpc

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb/noderpcpbconnect"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Client is a session.Service on a remote node: every call is forwarded to the
// node's handler (NewHandler); a node whose service lacks a method answers
// not_implemented, as do the groups the node RPC does not carry (nodes,
// projects, composing images: the API tier serves them). A Client is safe for
// concurrent use.
type Client struct {
	session.Unimplemented
	rpc noderpcpbconnect.NodeClient // streams, over HTTP/2
	// unary is Call over Connect, for nodes of earlier versions (older);
	// others get unary calls on the plain path (unary.go).
	unary noderpcpbconnect.NodeClient
	older atomic.Bool
	tr    *http.Transport
	tr1   *http.Transport // unary calls over HTTP/1.1 to a node over TLS (unaryTransport)
	conns *conns          // unary calls over HTTP/1.1 to an http:// node (unaryconn.go)
	tok   *tokenSigner
	now   func() time.Time
	// probeAfter and probeTimeout pace the liveness probes of a unary call
	// waiting for its answer (watch).
	probeAfter, probeTimeout time.Duration
	tracer                   trace.Tracer
	addr                     string // baseURL, for spans
}

var _ session.Service = (*Client)(nil)

// NewClient returns a client of the node at baseURL (http://host:port for h2c,
// https:// with opts.TLS).
func NewClient(baseURL string, opts ClientOptions) *Client {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := new(http.Protocols)
	if opts.TLS != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig:     opts.TLS,
		TLSHandshakeTimeout: opts.DialTimeout,
		Protocols:           p,
		HTTP2:               http2Config(opts.PingInterval, opts.PingTimeout),
		IdleConnTimeout:     90 * time.Second,
	}
	tok := &tokenSigner{secret: opts.Secret}
	hc := &http.Client{Transport: &signer{next: tr, tok: tok, now: opts.Now}}
	d := unaryDialer(opts)
	tr1 := unaryTransport(opts, d)
	var cs *conns
	if opts.TLS == nil {
		cs = newConns(baseURL, d)
	}
	hc1 := &http.Client{Transport: &signer{next: tr1, tok: tok, now: opts.Now}}
	return &Client{
		rpc: noderpcpbconnect.NewNodeClient(hc, baseURL, connect.WithReadMaxBytes(maxMessageBytes),
			connect.WithAcceptCompression("gzip", nil, nil)),
		unary: noderpcpbconnect.NewNodeClient(hc1, baseURL, connect.WithReadMaxBytes(maxMessageBytes),
			connect.WithAcceptCompression("gzip", nil, nil)),
		tr: tr, tr1: tr1, conns: cs, tok: tok, now: opts.Now,
		probeAfter: orDefault(opts.PingInterval, DefaultPingInterval), probeTimeout: orDefault(opts.PingTimeout, DefaultPingTimeout),
		tracer: clientTracer(opts.Tracer),
		addr:   strings.TrimSuffix(baseURL, "/"),
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// unaryTransport carries the unary calls: HTTP/1.1 over a pool of keep-alive
// connections, one call per connection at a time. A unary call costs about a
// fifth less CPU on both ends than as an HTTP/2 stream (no frame scheduling, no
// goroutine hand-offs per frame), which is most of a create's cost at a
// thousand creates a second. HTTP/2's pings are replaced by TCP keepalive
// probes and TCP_USER_TIMEOUT with the same interval and timeout, so a call to a
// node that vanished ends within about PingInterval+PingTimeout as before; a
// node whose kernel still answers but whose process does not (hung, stopped) is
// caught by watch.
func unaryTransport(opts ClientOptions, d *net.Dialer) *http.Transport {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	return &http.Transport{
		DialContext:         d.DialContext,
		TLSClientConfig:     opts.TLS,
		TLSHandshakeTimeout: opts.DialTimeout,
		Protocols:           p,
		// Enough idle connections for the calls a busy API server has in
		// flight to one node, so bursts reuse them instead of dialling.
		MaxIdleConnsPerHost: unaryIdlePerNode,
		IdleConnTimeout:     90 * time.Second,
		// Nodes answer unary calls uncompressed: no Accept-Encoding header.
		DisableCompression: true,
	}
}

// unaryDialer dials the connections of unary calls (unaryTransport, conns):
// TCP keepalive probes and TCP_USER_TIMEOUT in place of HTTP/2's pings.
func unaryDialer(opts ClientOptions) *net.Dialer {
	interval, timeout := orDefault(opts.PingInterval, DefaultPingInterval), orDefault(opts.PingTimeout, DefaultPingTimeout)
	return &net.Dialer{
		Timeout:         opts.DialTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: interval, Interval: timeout, Count: 1},
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int((interval + timeout).Milliseconds()))
			})
			return errors.Join(err, serr)
		},
	}
}

// unaryIdlePerNode is how many idle unary connections a client keeps per node.
const unaryIdlePerNode = 64

// Close closes the client's idle connections; calls in flight go on.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	c.tr1.CloseIdleConnections()
	if c.conns != nil {
		c.conns.close()
	}
	return nil
}

// signer puts a fresh cluster token, the caller's trace context and step tag
// on every request, and reports a replayed step's answer to the caller.
type signer struct {
	next http.RoundTripper
	tok  *tokenSigner
	now  func() time.Time
}

func (s *signer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", s.tok.header(s.now()))
	injectTrace(r.Context(), propagation.HeaderCarrier(r.Header))
	injectStep(r.Context(), r.Header)
	resp, err := s.next.RoundTrip(r)
	if err == nil {
		reportReplayed(r.Context(), resp.Header)
	}
	return resp, err
}

// call runs a unary method; out (a pointer, or nil) receives its answer.
func (c *Client) call(ctx context.Context, method string, a callArgs, out any) (err error) {
	ctx, end := c.span(ctx, method)
	defer func() { end(err) }()
	args, err := json.Marshal(a)
	if err != nil {
		return errdefs.Internal(err, "node rpc %s: encoding arguments", method)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := c.watch(cctx, cancel)
	var res []byte
	if !c.older.Load() {
		res, err = c.post(cctx, method, args)
		if errors.Is(err, errOlderNode) {
			c.older.Store(true)
		}
	}
	if c.older.Load() {
		var resp *connect.Response[noderpcpb.CallResponse]
		if resp, err = c.unary.Call(cctx, connect.NewRequest(&noderpcpb.CallRequest{Method: method, Args: args})); err == nil {
			res = resp.Msg.GetResult()
		}
	}
	stop()
	if err != nil {
		var answer *Error
		if errors.As(err, &answer) {
			return err // the node's answer
		}
		if cause := context.Cause(cctx); ctx.Err() == nil && errors.Is(cause, errSilentNode) {
			return unavailable(method, cause)
		}
		return fromWire(ctx, method, err)
	}
	if out == nil || len(res) == 0 {
		return nil
	}
	if err := json.Unmarshal(res, out); err != nil {
		return errdefs.Wrap(api.CodeInternal, err, "node rpc %s: decoding the answer", method)
	}
	return nil
}

// errSilentNode ends a unary call whose node stopped answering probes.
var errSilentNode = errors.New("the node stopped answering (no answer to a liveness probe over HTTP/2)")

// watch probes the node over the HTTP/2 connection (whose pings detect a dead
// peer) every probeAfter while a unary call waits for its answer, and ends the
// call with errSilentNode when a probe gets no answer within probeTimeout.
// Calls answered within probeAfter (nearly all) cost one timer. It returns a
// function that stops the watch.
func (c *Client) watch(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	var t *time.Timer
	probe := func() {
		if ctx.Err() != nil {
			return
		}
		pctx, pcancel := context.WithTimeout(ctx, c.probeTimeout)
		_, err := c.rpc.Call(pctx, connect.NewRequest(&noderpcpb.CallRequest{Method: pingMethod}))
		pcancel()
		switch {
		case ctx.Err() != nil:
		case err != nil && !answered(err):
			cancel(errSilentNode)
		default:
			t.Reset(c.probeAfter)
		}
	}
	t = time.AfterFunc(time.Hour, probe)
	t.Reset(c.probeAfter) // after t is set: probe uses it
	return func() { t.Stop() }
}

// answered reports whether err is an answer from the node's handler (it carries
// ErrorInfo), not a transport failure.
func answered(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	if _, ok := errdefs.FromConnectLayer(ce.Code()); ok {
		return true
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if _, ok := v.(*noderpcpb.ErrorInfo); ok {
				return true
			}
		}
	}
	return false
}

// callFor runs a unary method and returns its answer as a T.
func callFor[T any](ctx context.Context, c *Client, method string, a callArgs) (T, error) {
	var out T
	err := c.call(ctx, method, a, &out)
	return out, err
}

func (c *Client) Info(ctx context.Context) (api.Info, error) {
	return callFor[api.Info](ctx, c, "Info", callArgs{})
}

func (c *Client) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	return callFor[api.Sandbox](ctx, c, "Create", callArgs{Create: &req})
}

func (c *Client) Get(ctx context.Context, id string) (api.Sandbox, error) {
	return callFor[api.Sandbox](ctx, c, "Get", callArgs{ID: id})
}

func (c *Client) List(ctx context.Context) ([]api.Sandbox, error) {
	return callFor[[]api.Sandbox](ctx, c, "List", callArgs{})
}

func (c *Client) Delete(ctx context.Context, id string) error {
	return c.call(ctx, "Delete", callArgs{ID: id}, nil)
}

func (c *Client) Pause(ctx context.Context, id string) (api.Sandbox, error) {
	return callFor[api.Sandbox](ctx, c, "Pause", callArgs{ID: id})
}

func (c *Client) Resume(ctx context.Context, id string) (api.Sandbox, error) {
	return callFor[api.Sandbox](ctx, c, "Resume", callArgs{ID: id})
}

func (c *Client) Reset(ctx context.Context, id string) (api.Sandbox, error) {
	return callFor[api.Sandbox](ctx, c, "Reset", callArgs{ID: id})
}

func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	return callFor[api.ExecResult](ctx, c, "Exec", callArgs{ID: id, Exec: &req})
}

func (c *Client) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	return callFor[api.Process](ctx, c, "StartProcess", callArgs{ID: id, Exec: &req})
}

func (c *Client) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	return callFor[[]api.Process](ctx, c, "ListProcesses", callArgs{ID: id})
}

func (c *Client) GetProcess(ctx context.Context, id, procID string) (api.Process, error) {
	return callFor[api.Process](ctx, c, "GetProcess", callArgs{ID: id, Proc: procID})
}

// waitGrace bounds the status lookup WaitProcess makes when its context ends.
const waitGrace = 5 * time.Second

// WaitProcess blocks until the process exits or ctx ends; then, like the
// service contract says, it returns the still-running process (looked up once
// more) and no error.
func (c *Client) WaitProcess(ctx context.Context, id, procID string) (api.Process, error) {
	p, err := callFor[api.Process](ctx, c, "WaitProcess", callArgs{ID: id, Proc: procID})
	if err == nil || ctx.Err() == nil {
		return p, err
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), waitGrace)
	defer cancel()
	return c.GetProcess(gctx, id, procID)
}

func (c *Client) SendProcessInput(ctx context.Context, id, procID string, in api.ProcessInput) error {
	return c.call(ctx, "SendProcessInput", callArgs{ID: id, Proc: procID, ProcInput: &in}, nil)
}

// FollowProcess waits on the node (up to req.WaitMs) for output past req's
// offsets or the process's end.
func (c *Client) FollowProcess(ctx context.Context, id, procID string, req api.FollowRequest) (api.ProcessOutput, error) {
	return callFor[api.ProcessOutput](ctx, c, "FollowProcess", callArgs{ID: id, Proc: procID, Follow: &req})
}

func (c *Client) KillProcess(ctx context.Context, id, procID string, sig int) error {
	return c.call(ctx, "KillProcess", callArgs{ID: id, Proc: procID, Signal: sig}, nil)
}

func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	return callFor[api.ForkResult](ctx, c, "Fork", callArgs{ID: id, Fork: &req})
}

func (c *Client) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	return callFor[api.CommitResult](ctx, c, "Commit", callArgs{ID: id, Commit: &req})
}

func (c *Client) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error) {
	return callFor[api.Sandbox](ctx, c, "SetNetwork", callArgs{ID: id, Network: &p})
}

func (c *Client) PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error) {
	return callFor[api.PauseResponse](ctx, c, "PauseWith", callArgs{ID: id, Pause: &req})
}

func (c *Client) CreateWatch(ctx context.Context, id string, req api.WatchRequest) (api.Watch, error) {
	return callFor[api.Watch](ctx, c, "CreateWatch", callArgs{ID: id, Watch: &req})
}

func (c *Client) WatchEvents(ctx context.Context, id, watchID string) ([]api.WatchEvent, error) {
	return callFor[[]api.WatchEvent](ctx, c, "WatchEvents", callArgs{ID: id, WatchID: watchID})
}

func (c *Client) RemoveWatch(ctx context.Context, id, watchID string) error {
	return c.call(ctx, "RemoveWatch", callArgs{ID: id, WatchID: watchID}, nil)
}

func (c *Client) SetDeadline(ctx context.Context, id string, req api.DeadlineRequest) (api.Sandbox, error) {
	return callFor[api.Sandbox](ctx, c, "SetDeadline", callArgs{ID: id, Deadline: &req})
}

func (c *Client) SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error) {
	return callFor[api.Sandbox](ctx, c, "SetCPUClass", callArgs{ID: id, Class: class})
}

func (c *Client) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	return callFor[api.FnCallResult](ctx, c, "FnCall", callArgs{FnCall: &req})
}

func (c *Client) Images(ctx context.Context) ([]api.Image, error) {
	return callFor[[]api.Image](ctx, c, "Images", callArgs{})
}

func (c *Client) Image(ctx context.Context, name string) (api.Image, error) {
	return callFor[api.Image](ctx, c, "Image", callArgs{ID: name})
}

func (c *Client) RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error) {
	return callFor[[]api.RecordedLayer](ctx, c, "RecordImage", callArgs{ID: name})
}

func (c *Client) ImagePulls(ctx context.Context, ref string) ([]api.PullProgress, error) {
	return callFor[[]api.PullProgress](ctx, c, "ImagePulls", callArgs{ID: ref})
}

// NodeStatus asks the node for its capacity, load and backends.
func (c *Client) NodeStatus(ctx context.Context) (Status, error) {
	return callFor[Status](ctx, c, "NodeStatus", callArgs{})
}

func (c *Client) Screenshot(ctx context.Context, id string) ([]byte, error) {
	return callFor[[]byte](ctx, c, "Screenshot", callArgs{ID: id})
}

func (c *Client) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	return callFor[api.InputResult](ctx, c, "SendInput", callArgs{ID: id, Input: &req})
}

// SandboxUsage is the node's reading of its
// sandboxes' CPU and memory (at most MaxUsageIDs ids; none: every sandbox).
func (c *Client) SandboxUsage(ctx context.Context, ids []string) ([]api.SandboxUsage, error) {
	return callFor[[]api.SandboxUsage](ctx, c, "SandboxUsage", callArgs{IDs: ids})
}

// UsageHistory is the node's usage samples of sandbox id.
func (c *Client) UsageHistory(ctx context.Context, id string, req api.UsageHistoryRequest) ([]api.UsageSample, error) {
	return callFor[[]api.UsageSample](ctx, c, "UsageHistory", callArgs{ID: id, Usage: &req})
}

// ListTrajectories lists the trajectories the node logs.
func (c *Client) ListTrajectories(ctx context.Context) ([]api.Trajectory, error) {
	return callFor[[]api.Trajectory](ctx, c, "ListTrajectories", callArgs{})
}

func (c *Client) GetTrajectory(ctx context.Context, id string) (api.Trajectory, error) {
	return callFor[api.Trajectory](ctx, c, "GetTrajectory", callArgs{ID: id})
}

func (c *Client) DeleteTrajectory(ctx context.Context, id string) error {
	return c.call(ctx, "DeleteTrajectory", callArgs{ID: id}, nil)
}

func (c *Client) RebuildTrajectory(ctx context.Context, id string) (api.RebuildResponse, error) {
	return callFor[api.RebuildResponse](ctx, c, "RebuildTrajectory", callArgs{ID: id})
}
