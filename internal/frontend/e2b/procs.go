package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/errdefs"
	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Processes started through Process.Start are the node's background processes
// (session.Processes): the node keeps them, their output logs, their open
// input and their E2B tag and configuration (as process labels), so that any
// API server lists, connects to, feeds and signals a process whichever one
// started it, and a restart of the front end loses none. A stream follows a
// process by asking the node for output past the offsets it has sent
// (session.Processes.FollowProcess, which answers as soon as there is some or
// the process has ended) until the process has ended. The E2B PID is
// the process's PID in the sandbox, as the node recorded it.

const (
	// syntheticPIDBase numbers processes whose record has no PID (a step
	// answered from the trajectory log): above Linux's largest pid_max, so
	// they never collide with a real PID. The number is the node's own
	// ("p7" is syntheticPIDBase+7), so every API server derives the same.
	syntheticPIDBase = 1 << 22
	// followWait bounds one wait of a stream for output or the end on the
	// node (a keepalive interval shorter than it bounds it instead).
	followWait = 30 * time.Second
	// maxChunk is the most output one data event carries.
	maxChunk = 64 << 10

	labelProcTag    = labelPrefix + "tag"
	labelProcConfig = labelPrefix + "process" // the ProcessConfig, as JSON
)

// procLabels keeps what E2B's List shows of a process: its tag and config.
func procLabels(msg *pb.StartRequest) map[string]string {
	l := map[string]string{}
	if t := msg.GetTag(); t != "" {
		l[labelProcTag] = t
	}
	cfg := msg.GetProcess()
	if b, err := json.Marshal(struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args,omitempty"`
		Envs map[string]string `json:"envs,omitempty"`
		Cwd  string            `json:"cwd,omitempty"`
	}{cfg.GetCmd(), cfg.GetArgs(), cfg.GetEnvs(), cfg.GetCwd()}); err == nil {
		l[labelProcConfig] = string(b)
	}
	return l
}

// configOf is the ProcessConfig p was started with.
func configOf(p api.Process) *pb.ProcessConfig {
	var c struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args"`
		Envs map[string]string `json:"envs"`
		Cwd  string            `json:"cwd"`
	}
	if err := json.Unmarshal([]byte(p.Labels[labelProcConfig]), &c); err != nil && len(p.Cmd) > 0 {
		c.Cmd, c.Args = p.Cmd[0], p.Cmd[1:]
	}
	cfg := &pb.ProcessConfig{Cmd: c.Cmd, Args: c.Args, Envs: c.Envs}
	if c.Cwd != "" {
		cfg.Cwd = &c.Cwd
	}
	return cfg
}

// pidOf is p's E2B PID.
func pidOf(p api.Process) uint32 {
	if p.PID > 0 {
		return uint32(p.PID)
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(p.ID, "p"))
	return uint32(syntheticPIDBase + n)
}

// findProc returns the process sel names in sandbox id: a running one first,
// else the one started last.
func (h *Handler) findProc(ctx context.Context, id string, sel *pb.ProcessSelector) (api.Process, error) {
	if sel == nil || sel.Selector == nil {
		return api.Process{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector (pid or tag) is required"))
	}
	all, err := h.svc.ListProcesses(session.WithoutStep(ctx), id)
	if err != nil {
		return api.Process{}, rpcErr(err)
	}
	var found *api.Process
	for i := range all {
		p := &all[i]
		var match bool
		switch s := sel.Selector.(type) {
		case *pb.ProcessSelector_Pid:
			match = pidOf(*p) == s.Pid
		case *pb.ProcessSelector_Tag:
			match = s.Tag != "" && p.Labels[labelProcTag] == s.Tag
		}
		if match && (found == nil || (p.Running && !found.Running) ||
			(p.Running == found.Running && p.StartedAt.After(found.StartedAt))) {
			found = p
		}
	}
	if found != nil {
		return *found, nil
	}
	if t, ok := sel.Selector.(*pb.ProcessSelector_Tag); ok {
		return api.Process{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", t.Tag))
	}
	return api.Process{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", sel.GetPid()))
}

// liveProc is findProc for a process that must still run.
func (h *Handler) liveProc(ctx context.Context, id string, sel *pb.ProcessSelector) (api.Process, error) {
	p, err := h.findProc(ctx, id, sel)
	if err == nil && !p.Running {
		err = connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d has ended", pidOf(p)))
	}
	return p, err
}

// logEnd returns how much output process p has logged so far.
func (h *Handler) logEnd(ctx context.Context, id string, p api.Process, stream string) (int64, error) {
	rc, err := h.svc.ProcessLogs(session.WithoutStep(ctx), id, p.ID, stream, 0)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}

// follower streams one process's events from log offsets on.
type follower struct {
	h       *Handler
	sandbox string
	p       api.Process
	offs    map[string]int64
	send    func(*pb.ProcessEvent) error
}

// sendOutput sends what one answer of the node carried as data events.
func (f *follower) sendOutput(out api.ProcessOutput) error {
	for _, o := range []struct {
		stream string
		b      []byte
	}{{"stdout", out.Stdout}, {"stderr", out.Stderr}} {
		if len(o.b) == 0 {
			continue
		}
		f.offs[o.stream] += int64(len(o.b))
		if err := f.send(dataEvent(o.stream, f.p.TTY, o.b)); err != nil {
			return err
		}
	}
	return nil
}

func dataEvent(stream string, tty bool, b []byte) *pb.ProcessEvent {
	ev := &pb.ProcessEvent_DataEvent{}
	switch {
	case tty:
		ev.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: b}
	case stream == "stderr":
		ev.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		ev.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: ev}}
}

// run sends start, then output as the node has it and keepalives, then
// end as soon as the process has ended: each FollowProcess call waits on the
// node until there is output or the end (or a keepalive is due). An ended
// process gets its end at once.
func (f *follower) run(ctx context.Context, keepalive time.Duration) error {
	if err := f.send(startEvent(pidOf(f.p))); err != nil {
		return err
	}
	wait := followWait
	if keepalive > 0 && keepalive < wait {
		wait = keepalive
	}
	for {
		out, err := f.h.svc.FollowProcess(session.WithoutStep(ctx), f.sandbox, f.p.ID, api.FollowRequest{
			StdoutOffset: f.offs["stdout"], StderrOffset: f.offs["stderr"],
			WaitMs: max(wait.Milliseconds(), 1), MaxBytes: maxChunk,
		})
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			f.abortIfSandboxGone(ctx)
			return rpcErr(err)
		}
		if err := f.sendOutput(out); err != nil {
			return err
		}
		if out.Ended {
			// A failure or a signal may be the sandbox's deletion killing it.
			if r := out.Process.Result; r == nil || r.Error != "" || r.Signal != "" {
				f.abortIfSandboxGone(ctx)
			}
			return f.send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: endEvent(resultOf(out.Process), nil)}})
		}
		if keepalive > 0 && len(out.Stdout)+len(out.Stderr) == 0 && out.Process.Running {
			if err := f.send(keepaliveEvent); err != nil {
				return err
			}
		}
	}
}

// abortIfSandboxGone drops the client's connection when the process's
// sandbox no longer runs: E2B's proxy does so for a command whose sandbox was
// killed (the SDK raises its timeout error), where dsec would otherwise end
// the stream with the node's failure to reach the process.
func (f *follower) abortIfSandboxGone(ctx context.Context) {
	sb, err := f.h.svc.Get(session.WithoutStep(ctx), f.sandbox)
	if (err != nil && errdefs.Is(err, api.CodeNotFound)) || (err == nil && sb.State != api.StateRunning && sb.State != api.StatePaused) {
		panic(http.ErrAbortHandler)
	}
}

// resultOf is an ended process's result.
func resultOf(p api.Process) api.ExecResult {
	if p.Result == nil {
		return api.ExecResult{ExitCode: -1, Error: "exit status lost"}
	}
	return *p.Result
}
