package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process/processconnect"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// processService implements envd's process.Process over the session service.
type processService struct {
	processconnect.UnimplementedProcessHandler
	h *Handler
}

// userOf reads the user an envd call runs as: "Authorization: Basic
// base64(user:)"; empty means the sandbox's default user.
func userOf(hd http.Header) (string, error) {
	v := hd.Get("Authorization")
	if v == "" {
		return "", nil
	}
	scheme, enc, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", nil // a bearer token for dsec itself, not a user
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("malformed Basic authorization header"))
	}
	user, _, _ := strings.Cut(string(b), ":")
	return user, nil
}

// keepaliveInterval reads Keepalive-Ping-Interval (seconds); 0 means none.
func keepaliveInterval(hd http.Header) time.Duration {
	n, err := strconv.Atoi(hd.Get(keepaliveHeader))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// execRequest maps a StartRequest to the session's exec request.
func execRequest(ctx context.Context, msg *pb.StartRequest, user string) (api.ExecRequest, error) {
	cfg := msg.GetProcess()
	if cfg.GetCmd() == "" {
		return api.ExecRequest{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	req := api.ExecRequest{Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: cfg.GetEnvs(), Cwd: cfg.GetCwd(), User: user}
	if msg.Pty != nil {
		req.TTY = true
		req.Cols, req.Rows = int(msg.Pty.GetSize().GetCols()), int(msg.Pty.GetSize().GetRows())
	}
	// Like envd, the request's timeout (Connect-Timeout-Ms) bounds the process,
	// not only the stream.
	if dl, ok := ctx.Deadline(); ok {
		req.TimeoutMs = max(time.Until(dl).Milliseconds(), 1)
	}
	return req, nil
}

// endEvent maps an exec's result to envd's end event.
func endEvent(res api.ExecResult, err error) *pb.ProcessEvent_EndEvent {
	if err != nil {
		msg := err.Error()
		return &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "error", Error: &msg}
	}
	end := &pb.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: res.Signal == "", Status: fmt.Sprintf("exit status %d", res.ExitCode)}
	if res.Signal != "" {
		end.ExitCode = -1
		end.Status = "signal: " + signalText(res.Signal)
	}
	if res.Error != "" {
		e := res.Error
		end.Error = &e
	}
	return end
}

// signalText is Go's description of a signal ("killed" for SIGKILL), as envd
// reports it.
func signalText(name string) string {
	if n := unix.SignalNum(name); n != 0 {
		return n.String()
	}
	return strings.ToLower(name)
}

func startEvent(pid uint32) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}
}

var keepaliveEvent = &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}

// Start runs a process and streams its events: start{pid} first, end last.
func (s *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	h := s.h
	id := req.Header().Get(SandboxIDHeader)
	user, err := userOf(req.Header())
	if err != nil {
		return err
	}
	ereq, err := execRequest(ctx, req.Msg, user)
	if err != nil {
		return err
	}
	ereq.Cmd[0] = h.shell(ctx, id, ereq.Cmd[0])
	withStdin := req.Msg.Pty != nil || req.Msg.Stdin == nil || req.Msg.GetStdin()
	p := newProc(id, req.Msg, withStdin)
	sub := p.attach()
	procCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	go h.runProc(procCtx, p, ereq)
	return s.follow(ctx, p, sub, req.Header(), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

// shell returns cmd, except that E2B's SDKs run every command and terminal
// with /bin/bash, which an image may lack (busybox): there /bin/sh takes its
// place. Whether a sandbox has bash is looked up once.
func (h *Handler) shell(ctx context.Context, sandbox, cmd string) string {
	if cmd != "/bin/bash" {
		return cmd
	}
	h.mu.Lock()
	has, known := h.hasBash[sandbox]
	h.mu.Unlock()
	if !known {
		ctx = session.WithoutStep(ctx)
		fs, err := h.svc.FS(ctx, sandbox)
		if err != nil {
			return cmd
		}
		_, err = fs.Stat(ctx, "/bin/bash")
		fs.Close()
		if err != nil && !errdefs.Is(err, api.CodeNotFound) {
			return cmd
		}
		has = err == nil
		h.mu.Lock()
		h.hasBash[sandbox] = has
		h.mu.Unlock()
	}
	if has {
		return cmd
	}
	return "/bin/sh"
}

// runProc runs p's exec to its end.
func (h *Handler) runProc(ctx context.Context, p *proc, req api.ExecRequest) {
	defer p.cancel()
	st := session.Stream{Stdout: output{p: p, kind: 0, t: h.procs}, Stderr: output{p: p, kind: 1, t: h.procs},
		Control: p.control, Started: func(pid int) { h.procs.register(p, uint32(pid)) }}
	if p.tty {
		st.Stdout = output{p: p, kind: 2, t: h.procs}
	}
	if p.stdinR != nil {
		st.Stdin = p.stdinR
	}
	res, err := h.svc.ExecStream(ctx, p.sandbox, req, st)
	select {
	case <-p.started:
	default:
		if err != nil { // it never ran: the Start call fails with err
			p.mu.Lock()
			p.startErr = err
			p.end = &pb.ProcessEvent_EndEvent{}
			p.mu.Unlock()
			close(p.done)
			return
		}
	}
	h.procs.ensurePID(p)
	p.finish(endEvent(res, err))
	h.procs.ended(p)
}

// follow streams p's events to send: start, then data and keepalives, then end.
// sub is nil when p had already ended.
func (s *processService) follow(ctx context.Context, p *proc, sub *subscriber, hd http.Header, send func(*pb.ProcessEvent) error) error {
	if sub != nil {
		defer p.detach(sub)
	}
	select {
	case <-p.started:
	case <-p.done:
		if p.startErr != nil {
			return rpcErr(p.startErr)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := send(startEvent(p.getPID())); err != nil {
		return err
	}
	if sub == nil {
		p.mu.Lock()
		end := p.end
		p.mu.Unlock()
		return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}})
	}
	var tick <-chan time.Time
	if d := keepaliveInterval(hd); d > 0 {
		t := time.NewTicker(d)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return err
			}
			if _, ok := ev.Event.(*pb.ProcessEvent_End); ok {
				return nil
			}
		case <-tick:
			if err := send(keepaliveEvent); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// lookupProc finds the process sel names, or answers NotFound.
func (s *processService) lookupProc(hd http.Header, sel *pb.ProcessSelector) (*proc, error) {
	id := hd.Get(SandboxIDHeader)
	if sel == nil || sel.Selector == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector (pid or tag) is required"))
	}
	if p := s.h.procs.find(id, sel); p != nil {
		return p, nil
	}
	if t, ok := sel.Selector.(*pb.ProcessSelector_Tag); ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", t.Tag))
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", sel.GetPid()))
}

// liveProc is lookupProc for a process that must still run.
func (s *processService) liveProc(hd http.Header, sel *pb.ProcessSelector) (*proc, error) {
	p, err := s.lookupProc(hd, sel)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d has ended", p.getPID()))
	default:
		return p, nil
	}
}

// Connect attaches to a running (or just ended) process's events.
func (s *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.lookupProc(req.Header(), req.Msg.GetProcess())
	if err != nil {
		return err
	}
	return s.follow(ctx, p, p.attach(), req.Header(), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// List lists the processes started through envd that still run.
func (s *processService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	out := &pb.ListResponse{}
	for _, p := range s.h.procs.list(req.Header().Get(SandboxIDHeader)) {
		info := &pb.ProcessInfo{Config: p.config, Pid: p.getPID()}
		if p.tag != "" {
			info.Tag = &p.tag
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

// writeInput writes to p's standard input (or terminal).
func writeInput(ctx context.Context, p *proc, in *pb.ProcessInput) error {
	var data []byte
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		data = v.Stdin
	case *pb.ProcessInput_Pty:
		if !p.tty {
			return connect.NewError(connect.CodeFailedPrecondition, errors.New("the process has no terminal"))
		}
		data = v.Pty
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input (stdin or pty) is required"))
	}
	if p.stdin == nil {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("the process was started without stdin"))
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.stdin.Write(data)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("stdin is closed: %w", err))
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SendInput writes to a process's stdin or terminal.
func (s *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.liveProc(req.Header(), req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := writeInput(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput writes a stream of inputs to the process its first message names.
func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			var err error
			if p, err = s.liveProc(stream.RequestHeader(), ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must be start"))
			}
			if err := writeInput(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Keepalive:
		default:
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("empty stream input event"))
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// control delivers c to p's exec.
func control(ctx context.Context, p *proc, c session.Control) error {
	select {
	case p.control <- c:
		return nil
	case <-p.done:
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d has ended", p.getPID()))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SendSignal sends SIGTERM or SIGKILL to a process.
func (s *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	sig := req.Msg.GetSignal()
	if sig != pb.Signal_SIGNAL_SIGKILL && sig != pb.Signal_SIGNAL_SIGTERM {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid signal: %s", sig))
	}
	p, err := s.liveProc(req.Header(), req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := control(ctx, p, session.Control{Signal: int(sig)}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// CloseStdin ends a process's standard input.
func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.liveProc(req.Header(), req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	switch {
	case p.tty:
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("a terminal has no stdin to close; send Ctrl+D (0x04) instead"))
	case p.stdin == nil:
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the process was started without stdin"))
	}
	_ = p.stdin.Close()
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// Update resizes a process's terminal.
func (s *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.liveProc(req.Header(), req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		if !p.tty {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the process has no terminal"))
		}
		size := req.Msg.Pty.GetSize()
		if size.GetCols() == 0 || size.GetRows() == 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("pty size needs cols and rows"))
		}
		if err := control(ctx, p, session.Control{Resize: &api.TermSize{Cols: int(size.GetCols()), Rows: int(size.GetRows())}}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
