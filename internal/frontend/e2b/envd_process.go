package e2b

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
// The process runs as a, in the directory the request names, else workdir
// (the WorkingDir of the sandbox's image, as a template's setWorkdir records
// it), else a's home, with HOME, USER and LOGNAME set as envd sets them.
func execRequest(ctx context.Context, msg *pb.StartRequest, a account, workdir string) (api.ExecRequest, error) {
	cfg := msg.GetProcess()
	if cfg.GetCmd() == "" {
		return api.ExecRequest{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cwd := cmp.Or(cfg.GetCwd(), workdir, a.Home)
	req := api.ExecRequest{Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: userEnv(cfg.GetEnvs(), a), Cwd: cwd, User: a.Name}
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
		msg := publicError(err.Error())
		return &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "error", Error: &msg}
	}
	end := &pb.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: res.Signal == "", Status: fmt.Sprintf("exit status %d", res.ExitCode)}
	if res.Signal != "" {
		end.ExitCode = -1
		end.Status = "signal: " + signalText(res.Signal)
	}
	switch {
	case res.Error != "":
		e := publicError(res.Error)
		end.Error = &e
	case !end.Exited || end.ExitCode != 0:
		// envd's error is the wait error's text, which CommandExitError shows.
		e := end.Status
		end.Error = &e
	}
	return end
}

// hostDetail marks error texts of the node's own plumbing (its sockets and
// directories), which a sandbox's user must never see.
var hostDetail = []string{"/run/dsec", "/var/lib/dsec", "unixpacket", "initproto:"}

// publicError is text, or a neutral sentence when text names the host.
func publicError(text string) string {
	for _, d := range hostDetail {
		if strings.Contains(text, d) {
			return "the process was lost with its sandbox"
		}
	}
	return text
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

// Start starts a node background process and streams its events: start{pid}
// first, end last. The process outlives the call (and the API server).
func (s *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	h := s.h
	id := req.Header().Get(SandboxIDHeader)
	user, err := userOf(req.Header())
	if err != nil {
		return err
	}
	// A sandbox's first command looks up its user, its image's working
	// directory, its shell and the asked-for directory: each a call to the
	// node, made side by side (later commands find the first three kept).
	var workdir, shell string
	var dirErr error
	var wg sync.WaitGroup
	wg.Go(func() { workdir = h.workdir(ctx, id) })
	wg.Go(func() { shell = h.shell(ctx, id, req.Msg.GetProcess().GetCmd()) })
	if cwd := req.Msg.GetProcess().GetCwd(); cwd != "" {
		wg.Go(func() { dirErr = h.checkDir(ctx, id, cwd) })
	}
	a, err := h.userOfSandbox(ctx, id, user)
	wg.Wait()
	if err != nil {
		return rpcErr(err)
	}
	ereq, err := execRequest(ctx, req.Msg, a, workdir)
	if err != nil {
		return err
	}
	if dirErr != nil {
		return dirErr
	}
	ereq.Cmd[0] = shell
	ereq.OpenStdin = req.Msg.Pty != nil || req.Msg.Stdin == nil || req.Msg.GetStdin()
	ereq.Labels = procLabels(req.Msg)
	p, err := h.svc.StartProcess(ctx, id, ereq)
	if err != nil {
		return rpcErr(err)
	}
	f := &follower{h: h, sandbox: id, p: p, offs: map[string]int64{}, send: func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	}}
	return f.run(ctx, keepaliveInterval(req.Header()))
}

// checkDir refuses a working directory the sandbox lacks before anything
// starts, as envd does (invalid_argument, no events); a node only reports it
// as the process's start failure. When the sandbox's files cannot be looked at
// (it is gone, or paused) the start itself answers.
func (h *Handler) checkDir(ctx context.Context, sandbox, dir string) error {
	ctx = session.WithoutStep(ctx)
	fs, err := h.svc.FS(ctx, sandbox)
	if err != nil {
		return nil
	}
	defer fs.Close()
	fi, err := fs.Stat(ctx, dir)
	switch {
	case err != nil && errdefs.Is(err, api.CodeNotFound):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("working directory %q does not exist", dir))
	case err == nil && fi.Type != "dir":
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("working directory %q is not a directory", dir))
	}
	return nil
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

// workdir is the WorkingDir of sandbox's image ("" when it records none),
// looked up on the sandbox's first command and then kept with the sandbox;
// the image's answer is reused for its other sandboxes for templateListTTL
// (a template rebuilt since is read again). A lookup that fails is not kept:
// the command runs in the user's home and the next one looks again.
func (h *Handler) workdir(ctx context.Context, sandbox string) string {
	h.mu.Lock()
	dir, ok := h.workdirs[sandbox]
	h.mu.Unlock()
	if ok {
		return dir
	}
	ctx = session.WithoutStep(ctx)
	sb, err := h.svc.Get(ctx, sandbox)
	if err != nil {
		return ""
	}
	h.mu.Lock()
	known, ok := h.imageDirs[sb.Image]
	h.mu.Unlock()
	fresh := !ok || time.Since(known.at) >= templateListTTL
	if !fresh {
		dir = known.dir
	} else {
		img, err := h.svc.Image(ctx, sb.Image)
		if err != nil {
			return ""
		}
		if img.Config != nil {
			dir = img.Config.WorkingDir
		}
	}
	h.mu.Lock()
	h.workdirs[sandbox] = dir
	if fresh {
		h.imageDirs[sb.Image] = imageDir{dir: dir, at: time.Now()}
	}
	h.mu.Unlock()
	return dir
}

// imageDir is an image's WorkingDir as read at a time.
type imageDir struct {
	dir string
	at  time.Time
}

// Connect attaches to a running (or ended) process's events from now on.
func (s *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	h := s.h
	id := req.Header().Get(SandboxIDHeader)
	p, err := h.findProc(ctx, id, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	f := &follower{h: h, sandbox: id, p: p, offs: map[string]int64{}, send: func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	}}
	for _, st := range []string{"stdout", "stderr"} {
		if f.offs[st], err = h.logEnd(ctx, id, p, st); err != nil {
			return rpcErr(err)
		}
	}
	return f.run(ctx, keepaliveInterval(req.Header()))
}

// List lists the processes started through envd that still run.
func (s *processService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	all, err := s.h.svc.ListProcesses(session.WithoutStep(ctx), req.Header().Get(SandboxIDHeader))
	if err != nil {
		return nil, rpcErr(err)
	}
	out := &pb.ListResponse{}
	for _, p := range all {
		if !p.Running || p.Labels[labelProcConfig] == "" {
			continue // ended, or not started through envd
		}
		info := &pb.ProcessInfo{Config: configOf(p), Pid: pidOf(p)}
		if t := p.Labels[labelProcTag]; t != "" {
			info.Tag = &t
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

// input sends in to process p of sandbox id.
func (h *Handler) input(ctx context.Context, id string, p api.Process, in api.ProcessInput) error {
	err := h.svc.SendProcessInput(session.WithoutStep(ctx), id, p.ID, in)
	switch {
	case err == nil:
		return nil
	case errdefs.Is(err, api.CodeConflict):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return rpcErr(err)
}

// writeInput writes to p's standard input (or terminal).
func (h *Handler) writeInput(ctx context.Context, id string, p api.Process, in *pb.ProcessInput) error {
	var data []byte
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		data = v.Stdin
	case *pb.ProcessInput_Pty:
		if !p.TTY {
			return connect.NewError(connect.CodeFailedPrecondition, errors.New("the process has no terminal"))
		}
		data = v.Pty
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input (stdin or pty) is required"))
	}
	if !p.OpenStdin {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("the process was started without stdin"))
	}
	if len(data) == 0 {
		return nil
	}
	return h.input(ctx, id, p, api.ProcessInput{Data: data})
}

// SendInput writes to a process's stdin or terminal.
func (s *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	id := req.Header().Get(SandboxIDHeader)
	p, err := s.h.liveProc(ctx, id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := s.h.writeInput(ctx, id, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput writes a stream of inputs to the process its first message names.
func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	id := stream.RequestHeader().Get(SandboxIDHeader)
	var p *api.Process
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			got, err := s.h.liveProc(ctx, id, ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = &got
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must be start"))
			}
			if err := s.h.writeInput(ctx, id, *p, ev.Data.GetInput()); err != nil {
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

// SendSignal sends SIGTERM or SIGKILL to a process.
func (s *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	sig := req.Msg.GetSignal()
	if sig != pb.Signal_SIGNAL_SIGKILL && sig != pb.Signal_SIGNAL_SIGTERM {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid signal: %s", sig))
	}
	id := req.Header().Get(SandboxIDHeader)
	p, err := s.h.liveProc(ctx, id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := s.h.svc.KillProcess(session.WithoutStep(ctx), id, p.ID, int(sig)); err != nil {
		if errdefs.Is(err, api.CodeConflict) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d has ended", pidOf(p)))
		}
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// CloseStdin ends a process's standard input.
func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	id := req.Header().Get(SandboxIDHeader)
	p, err := s.h.liveProc(ctx, id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	switch {
	case p.TTY:
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("a terminal has no stdin to close; send Ctrl+D (0x04) instead"))
	case !p.OpenStdin:
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the process was started without stdin"))
	}
	if err := s.h.input(ctx, id, p, api.ProcessInput{EOF: true}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// Update resizes a process's terminal.
func (s *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	id := req.Header().Get(SandboxIDHeader)
	p, err := s.h.liveProc(ctx, id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		if !p.TTY {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the process has no terminal"))
		}
		size := req.Msg.Pty.GetSize()
		if size.GetCols() == 0 || size.GetRows() == 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("pty size needs cols and rows"))
		}
		if err := s.h.input(ctx, id, p, api.ProcessInput{Resize: &api.TermSize{Cols: int(size.GetCols()), Rows: int(size.GetRows())}}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
