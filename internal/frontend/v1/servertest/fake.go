// Package servertest is a test helper: an in-memory fake of session.Service for
// unit tests of the HTTP layer and of pkg/client. It is not a sandbox and isolates
// nothing; production code must not import it.
//
// Commands understood by Exec, ExecStream and StartProcess (argv, or a shell string
// split on spaces):
//
//	echo ARGS...   print ARGS joined by spaces and a newline, exit 0
//	cat            copy stdin to stdout, exit 0
//	warn ARGS...   print ARGS to stderr, exit 0
//	exit N         exit with code N
//	sleep          run until signalled (exit -1 with the signal) or the context ends
//
// A streaming exec with tty: true writes its stderr to stdout, as a terminal would,
// and records the resizes it receives (Resizes).
//
// Anything else exits 127 with an Error.
package servertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/session/hostfs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Node is the fake. The zero value is not usable; call NewNode.
type Node struct {
	session.Unimplemented
	// Root is the host directory every sandbox's FS opens (shared by all).
	Root string

	mu        sync.Mutex
	seq       int
	sandboxes map[string]*api.Sandbox
	order     []string
	ports     map[int]string // sandbox port → host address Dial connects to
	procs     map[string]*proc
	creates   []api.CreateSandboxRequest
	signals   []int
	resizes   []api.TermSize
}

type proc struct {
	p      api.Process
	stdout bytes.Buffer
	stderr bytes.Buffer
	sig    chan int
	done   chan struct{}
}

// NewNode returns an empty fake whose file system is rooted at root.
func NewNode(root string) *Node {
	return &Node{
		Root:      root,
		sandboxes: map[string]*api.Sandbox{},
		ports:     map[int]string{},
		procs:     map[string]*proc{},
	}
}

var _ session.Service = (*Node)(nil)

// ExposePort makes Dial(any sandbox, port) connect to addr on the host.
func (n *Node) ExposePort(port int, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ports[port] = addr
}

// Creates returns the create requests received so far.
func (n *Node) Creates() []api.CreateSandboxRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]api.CreateSandboxRequest(nil), n.creates...)
}

// Signals returns the signals delivered to streaming execs and processes so far.
func (n *Node) Signals() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]int(nil), n.signals...)
}

// Resizes returns the terminal sizes delivered to streaming execs so far.
func (n *Node) Resizes() []api.TermSize {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]api.TermSize(nil), n.resizes...)
}

func (n *Node) Info(context.Context) (api.Info, error) {
	return api.Info{Version: "test", Node: "fake", Backends: []string{api.BackendContainer},
		Images: []string{"default"}, Cgroup: "v2"}, nil
}

func (n *Node) Create(_ context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.creates = append(n.creates, req)
	if req.RequestID != "" {
		for _, sb := range n.sandboxes {
			if sb.RequestID == req.RequestID {
				return *sb, nil
			}
		}
	}
	if req.Image == "missing" {
		return api.Sandbox{}, errdefs.NotFound("image %q", req.Image)
	}
	if req.Image == "full" { // a node at its limit
		return api.Sandbox{}, errdefs.Exhausted(1500*time.Millisecond, "node is at its limit")
	}
	n.seq++
	now := time.Now().UTC()
	sb := &api.Sandbox{
		ID: fmt.Sprintf("sb-%d", n.seq), Backend: api.BackendContainer, Image: "default",
		State: api.StateRunning, CPU: 1, MemoryBytes: 512 << 20, DiskBytes: 1 << 30, PidsMax: 1024,
		CreatedAt: now, LastActiveAt: now, Env: req.Env, Labels: req.Labels, RequestID: req.RequestID,
	}
	if req.Image != "" {
		sb.Image = req.Image
	}
	n.sandboxes[sb.ID] = sb
	n.order = append(n.order, sb.ID)
	return *sb, nil
}

func (n *Node) get(id string) (*api.Sandbox, error) {
	sb, ok := n.sandboxes[id]
	if !ok {
		return nil, errdefs.NotFound("sandbox %q", id)
	}
	return sb, nil
}

func (n *Node) Get(_ context.Context, id string) (api.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb, err := n.get(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	return *sb, nil
}

// SetDeadline keeps the deadline on the sandbox (nothing enforces it).
func (n *Node) SetDeadline(_ context.Context, id string, req api.DeadlineRequest) (api.Sandbox, error) {
	if err := session.ValidateDeadline(req); err != nil {
		return api.Sandbox{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	sb, err := n.get(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.ExpiresAt, sb.OnExpiry = nil, ""
	if req.TimeoutSeconds > 0 {
		at := time.Now().Add(time.Duration(req.TimeoutSeconds) * time.Second).UTC()
		sb.ExpiresAt, sb.OnExpiry = &at, req.OnExpiry
	}
	return *sb, nil
}

func (n *Node) List(context.Context) ([]api.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []api.Sandbox
	for _, id := range n.order {
		if sb, ok := n.sandboxes[id]; ok {
			out = append(out, *sb)
		}
	}
	return out, nil
}

func (n *Node) Delete(_ context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.get(id); err != nil {
		return err
	}
	delete(n.sandboxes, id)
	return nil
}

func (n *Node) setState(id, from, to string) (api.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb, err := n.get(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if from != "" && sb.State != from {
		return api.Sandbox{}, errdefs.Conflict("sandbox %s is %s, not %s", id, sb.State, from)
	}
	sb.State = to
	return *sb, nil
}

func (n *Node) Pause(_ context.Context, id string) (api.Sandbox, error) {
	return n.setState(id, api.StateRunning, api.StatePaused)
}

func (n *Node) Resume(_ context.Context, id string) (api.Sandbox, error) {
	return n.setState(id, api.StatePaused, api.StateRunning)
}

func (n *Node) Reset(_ context.Context, id string) (api.Sandbox, error) {
	return n.setState(id, "", api.StateRunning)
}

// running checks that the sandbox exists and is not paused.
func (n *Node) running(id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb, err := n.get(id)
	if err != nil {
		return err
	}
	if sb.State != api.StateRunning {
		return errdefs.Conflict("sandbox %s is %s", id, sb.State)
	}
	return nil
}

func argv(req api.ExecRequest) []string {
	if len(req.Cmd) > 0 {
		return req.Cmd
	}
	return strings.Fields(req.Shell)
}

func (n *Node) recordSignal(sig int) {
	n.mu.Lock()
	n.signals = append(n.signals, sig)
	n.mu.Unlock()
}

// run interprets one command of the fake's tiny language.
func (n *Node) run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, signals <-chan int) api.ExecResult {
	start := time.Now()
	res := api.ExecResult{}
	switch args[0] {
	case "echo":
		fmt.Fprintln(stdout, strings.Join(args[1:], " "))
	case "warn":
		fmt.Fprintln(stderr, strings.Join(args[1:], " "))
	case "cat":
		if stdin != nil {
			if _, err := io.Copy(stdout, stdin); err != nil {
				res.ExitCode, res.Error = 1, err.Error()
			}
		}
	case "exit":
		if len(args) > 1 {
			res.ExitCode, _ = strconv.Atoi(args[1])
		}
	case "sleep":
		select {
		case sig := <-signals:
			n.recordSignal(sig)
			res.ExitCode, res.Signal = -1, SignalName(sig)
		case <-ctx.Done():
			res.ExitCode, res.Signal, res.TimedOut = -1, "SIGKILL", true
		}
	default:
		res.ExitCode, res.Error = 127, fmt.Sprintf("%s: command not found", args[0])
	}
	res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	return res
}

// SignalName names a signal the way the agent does ("SIGTERM").
func SignalName(sig int) string {
	if name := unix.SignalName(unix.Signal(sig)); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(sig)
}

func stdinOf(req api.ExecRequest) io.Reader {
	if req.StdinBase64 != "" {
		return strings.NewReader("(base64 stdin)")
	}
	return strings.NewReader(req.Stdin)
}

func (n *Node) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	if err := n.running(id); err != nil {
		return api.ExecResult{}, err
	}
	if req.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	var stdout, stderr bytes.Buffer
	res := n.run(ctx, argv(req), stdinOf(req), &stdout, &stderr, nil)
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	return res, nil
}

func (n *Node) ExecStream(ctx context.Context, id string, req api.ExecRequest, sio session.Stream) (api.ExecResult, error) {
	if err := n.running(id); err != nil {
		return api.ExecResult{}, err
	}
	if _, err := session.TermSizeOf(req); err != nil {
		return api.ExecResult{}, err
	}
	if sio.Started != nil {
		sio.Started(4242)
	}
	stdout, stderr := sio.Stdout, sio.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if req.TTY {
		stderr = stdout
	}
	signals := make(chan int)
	done := make(chan struct{})
	defer close(done)
	go n.control(sio.Control, signals, done)
	return n.run(ctx, argv(req), sio.Stdin, stdout, stderr, signals), nil
}

// control forwards a stream's signals to signals and records its resizes until
// done.
func (n *Node) control(ctl <-chan session.Control, signals chan<- int, done <-chan struct{}) {
	for {
		select {
		case c, ok := <-ctl:
			if !ok {
				ctl = nil
				continue
			}
			if c.Resize != nil {
				n.mu.Lock()
				n.resizes = append(n.resizes, *c.Resize)
				n.mu.Unlock()
			}
			if c.Signal != 0 {
				select {
				case signals <- c.Signal:
				case <-done:
					return
				}
			}
		case <-done:
			return
		}
	}
}

// syncBuffer guards a process's log buffer.
type syncBuffer struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (b syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (n *Node) StartProcess(_ context.Context, id string, req api.ExecRequest) (api.Process, error) {
	if err := n.running(id); err != nil {
		return api.Process{}, err
	}
	n.mu.Lock()
	n.seq++
	pr := &proc{
		p:    api.Process{ID: fmt.Sprintf("p-%d", n.seq), PID: 1000 + n.seq, Cmd: argv(req), Running: true, StartedAt: time.Now().UTC()},
		sig:  make(chan int, 1),
		done: make(chan struct{}),
	}
	n.procs[id+"/"+pr.p.ID] = pr
	p := pr.p
	n.mu.Unlock()
	go func() {
		defer close(pr.done)
		res := n.run(context.Background(), pr.p.Cmd, stdinOf(req),
			syncBuffer{&n.mu, &pr.stdout}, syncBuffer{&n.mu, &pr.stderr}, pr.sig)
		n.mu.Lock()
		pr.p.Running, pr.p.Result = false, &res
		n.mu.Unlock()
	}()
	return p, nil
}

func (n *Node) proc(id, procID string) (*proc, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.get(id); err != nil {
		return nil, err
	}
	pr, ok := n.procs[id+"/"+procID]
	if !ok {
		return nil, errdefs.NotFound("process %q in sandbox %q", procID, id)
	}
	return pr, nil
}

func (n *Node) ListProcesses(_ context.Context, id string) ([]api.Process, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.get(id); err != nil {
		return nil, err
	}
	var out []api.Process
	for key, pr := range n.procs {
		if strings.HasPrefix(key, id+"/") {
			out = append(out, pr.p)
		}
	}
	return out, nil
}

func (n *Node) GetProcess(_ context.Context, id, procID string) (api.Process, error) {
	pr, err := n.proc(id, procID)
	if err != nil {
		return api.Process{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return pr.p, nil
}

func (n *Node) WaitProcess(ctx context.Context, id, procID string) (api.Process, error) {
	pr, err := n.proc(id, procID)
	if err != nil {
		return api.Process{}, err
	}
	select {
	case <-pr.done:
	case <-ctx.Done():
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return pr.p, nil
}

func (n *Node) KillProcess(_ context.Context, id, procID string, sig int) error {
	pr, err := n.proc(id, procID)
	if err != nil {
		return err
	}
	select {
	case pr.sig <- sig:
	default: // a signal is already pending or the process ignores them
	}
	return nil
}

func (n *Node) ProcessLogs(_ context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	pr, err := n.proc(id, procID)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	b := pr.stdout.Bytes()
	if stream == "stderr" {
		b = pr.stderr.Bytes()
	}
	if offset > int64(len(b)) {
		offset = int64(len(b))
	}
	return io.NopCloser(bytes.NewReader(bytes.Clone(b[offset:]))), nil
}

// FollowProcess looks at the fake's in-memory logs every millisecond.
func (n *Node) FollowProcess(ctx context.Context, id, procID string, req api.FollowRequest) (api.ProcessOutput, error) {
	return session.FollowByPolling(ctx, n, id, procID, req, time.Millisecond)
}

func (n *Node) FS(_ context.Context, id string) (session.FS, error) {
	if err := n.running(id); err != nil {
		return nil, err
	}
	root, err := os.Open(n.Root)
	if err != nil {
		return nil, errdefs.Internal(err, "opening fake root")
	}
	return hostfs.New(fsops.New(root)), nil
}

// Dial connects to the host address exposed for port; an unexposed port fails like
// a closed port would.
func (n *Node) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	n.mu.Lock()
	_, err := n.get(id)
	addr, ok := n.ports[port]
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("dial port %d in sandbox %s: %w", port, id, errors.New("connection refused"))
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// Validated returns svc under the request validation (session.Validating), as
// every role composes its service: a front end over it refuses what a real
// server refuses.
func Validated(svc session.Service) session.Service {
	return session.Chain(svc, session.Validating(nil))
}
