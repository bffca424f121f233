package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/procio"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// bgProc is a background process. Its output goes to files in the agent's data dir
// (so it survives an agent restart); the init keeps its exit status by tag.
type bgProc struct {
	rec  procRecord
	done chan struct{}
	// ttyLog is the copy of a terminal's output into the stdout log (nil
	// without a terminal): detach waits for a write in progress.
	ttyLog *lockedWriter

	mu     sync.Mutex
	proc   driver.Proc
	result *api.ExecResult
	// stdin is the open input of a process started with OpenStdin (nil once
	// closed, and after a restart of the agent).
	stdin *io.PipeWriter
}

// lockedWriter serialises the writes of a terminal's pump into its log, so
// that detach can wait for the one in progress.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// wait returns once no write is in progress.
func (l *lockedWriter) wait() {
	l.mu.Lock()
	defer l.mu.Unlock() // nothing inside: waiting for the lock is the point
}

func (p *bgProc) view() api.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return api.Process{ID: p.rec.ID, PID: p.rec.PID, Cmd: p.rec.Cmd, Running: p.result == nil,
		StartedAt: p.rec.StartedAt, Result: p.result, TTY: p.rec.TTY, OpenStdin: p.rec.OpenStdin, Labels: p.rec.Labels}
}

func (p *bgProc) closeConn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil {
		p.proc.Close()
	}
}

// detach releases the connection to a process that keeps running (the agent
// is stopping; a successor re-attaches) and waits until this agent's copy of
// its terminal stopped writing to the log: a terminal has one output, and the
// successor's copy must be the only one, or the exit it reports could come
// before output this agent took from the terminal reached the log.
func (p *bgProc) detach() {
	p.closeConn()
	if p.ttyLog != nil {
		p.ttyLog.wait()
	}
}

// detachProcs detaches from every background process (Manager.Close).
func (sb *sandbox) detachProcs() {
	sb.mu.Lock()
	procs := make([]*bgProc, 0, len(sb.procs))
	for _, p := range sb.procs {
		procs = append(procs, p)
	}
	sb.mu.Unlock()
	for _, p := range procs {
		p.detach()
	}
}

func (m *Manager) logDir(id string) string { return paths.New(m.cfg.DataDir).Logs(id) }

func (m *Manager) logPath(id, procID, stream string) string {
	return filepath.Join(m.logDir(id), procID+"."+stream)
}

// StartProcess implements session.Service.
func (m *Manager) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	m.busy()
	defer m.busy()
	sb, inst, err := m.session(id)
	if err != nil {
		return api.Process{}, err
	}
	stdin, err := stdinBytes(req)
	if err != nil {
		return api.Process{}, err
	}
	sb.mu.Lock()
	sb.rec.NextProc++
	procID := fmt.Sprintf("p%d", sb.rec.NextProc)
	sb.mu.Unlock()
	spec, err := sb.procSpec(inst, req, procID)
	if err != nil {
		return api.Process{}, err
	}
	spec.OutputCap = m.bgLogCap()
	if err := os.MkdirAll(m.logDir(id), 0o700); err != nil {
		return api.Process{}, errdefs.Internal(err, "create log dir")
	}
	// The log files go to the process as they are (no agent copy in between),
	// except a terminal's output, which the driver pumps into the stdout file.
	var logs [2]*os.File
	defer func() {
		for _, f := range logs {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, s := range []string{"stdout", "stderr"} {
		f, err := os.OpenFile(m.logPath(id, procID, s), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
		if err != nil {
			return api.Process{}, errdefs.Internal(err, "create log file")
		}
		logs[i] = f
	}
	stdio := driver.Stdio{Stdout: logs[0], Stderr: logs[1]}
	var ttyCopy *lockedWriter
	if spec.TTY != nil {
		// One stream, pumped by the driver: capped here as the init caps pipes.
		ttyCopy = &lockedWriter{w: procio.CapWriter(logs[0], spec.OutputCap, 0)}
		stdio.Stdout = ttyCopy
	}
	if len(stdin) > 0 {
		stdio.Stdin = bytes.NewReader(stdin)
	}
	var inR *io.PipeReader
	var inW *io.PipeWriter
	if req.OpenStdin {
		inR, inW = io.Pipe()
		stdio.Stdin = io.MultiReader(bytes.NewReader(stdin), inR)
	}
	pr, err := inst.Exec(ctx, spec, stdio)
	if err != nil {
		if inW != nil {
			inW.Close()
		}
		return api.Process{}, err
	}
	bp := &bgProc{rec: procRecord{ID: procID, PID: pr.PID(), Cmd: spec.Args, StartedAt: m.now().UTC(), TTY: spec.TTY != nil,
		OpenStdin: req.OpenStdin, Labels: req.Labels},
		done: make(chan struct{}), proc: pr, ttyLog: ttyCopy, stdin: inW}
	sb.mu.Lock()
	sb.procs[procID] = bp
	sb.rec.Procs = append(sb.rec.Procs, bp.rec)
	err = m.journalProc(id, bp.rec) // not a record rewrite: procjournal.go
	sb.journaled = sb.journaled || err == nil
	sb.mu.Unlock()
	if err != nil {
		_ = pr.Signal(9)
		pr.Close()
		return api.Process{}, err
	}
	var ttyLog *os.File
	if spec.TTY != nil {
		// The driver pumps the terminal into the stdout log until the end.
		ttyLog, logs[0] = logs[0], nil
	}
	go func() {
		sb.watchProc(bp, pr, time.Duration(req.TimeoutMs)*time.Millisecond)
		closeFile(ttyLog)
	}()
	return bp.view(), nil
}

// watchProc waits for a background process and records its result.
func (sb *sandbox) watchProc(bp *bgProc, pr driver.Proc, timeout time.Duration) {
	var timedOut atomic.Bool
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() { timedOut.Store(true); _ = pr.Signal(9) })
		defer t.Stop()
	}
	t0 := bp.rec.StartedAt
	ex, err := pr.Wait(context.Background())
	pr.Close()
	var res api.ExecResult
	if err != nil {
		res = api.ExecResult{ExitCode: -1, Error: "lost track of the process: " + err.Error()}
	} else {
		res = result(ex, timedOut.Load(), sb.m.now().Sub(t0))
	}
	bp.mu.Lock()
	bp.result = &res
	bp.proc = nil
	if bp.stdin != nil {
		bp.stdin.Close()
		bp.stdin = nil
	}
	bp.mu.Unlock()
	close(bp.done)
}

// closeFile closes f if it is set.
func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// reattachProcs re-connects to the background processes of an adopted sandbox.
func (sb *sandbox) reattachProcs() {
	for _, r := range sb.rec.Procs {
		bp := &bgProc{rec: r, done: make(chan struct{})}
		sb.procs[r.ID] = bp
		var stdio driver.Stdio
		var logFile *os.File
		if r.TTY {
			// The terminal's output while the agent was away waited in the
			// terminal; it goes on into the same log.
			if f, err := os.OpenFile(sb.m.logPath(sb.rec.ID, r.ID, "stdout"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
				logFile = f
				var size int64
				if fi, err := f.Stat(); err == nil {
					size = fi.Size()
				}
				bp.ttyLog = &lockedWriter{w: procio.CapWriter(f, sb.m.bgLogCap(), size)}
				stdio.Stdout = bp.ttyLog
			}
		}
		pr, err := sb.inst.Attach(context.Background(), r.ID, stdio)
		if err != nil {
			closeFile(logFile)
			res := api.ExecResult{ExitCode: -1, Error: "exit status lost: " + err.Error()}
			bp.result = &res
			close(bp.done)
			continue
		}
		bp.proc = pr
		go func() {
			sb.watchProc(bp, pr, 0)
			closeFile(logFile)
		}()
	}
}

func (m *Manager) proc(id, procID string) (*sandbox, *bgProc, error) {
	sb, err := m.get(id)
	if err != nil {
		return nil, nil, err
	}
	sb.mu.Lock()
	bp := sb.procs[procID]
	sb.mu.Unlock()
	if bp == nil {
		return nil, nil, errdefs.NotFound("process %q not found in sandbox %s", procID, id)
	}
	sb.touch()
	return sb, bp, nil
}

// ListProcesses implements session.Service.
func (m *Manager) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	sb, err := m.get(id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	out := make([]api.Process, 0, len(sb.procs))
	for _, p := range sb.procs {
		out = append(out, p.view())
	}
	sb.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) || out[i].ID < out[j].ID })
	return out, nil
}

// GetProcess implements session.Service.
func (m *Manager) GetProcess(ctx context.Context, id, procID string) (api.Process, error) {
	_, bp, err := m.proc(id, procID)
	if err != nil {
		return api.Process{}, err
	}
	return bp.view(), nil
}

// WaitProcess implements session.Service.
func (m *Manager) WaitProcess(ctx context.Context, id, procID string) (api.Process, error) {
	sb, bp, err := m.proc(id, procID)
	if err != nil {
		return api.Process{}, err
	}
	select {
	case <-bp.done:
	case <-ctx.Done():
	}
	v := bp.view()
	if !v.Running && sb.gone() {
		return api.Process{}, errDeletedWhileRunning(id, "process "+procID)
	}
	return v, nil
}

// errDeletedWhileRunning is the answer about a process that ended because
// its sandbox was deleted: the sandbox is gone, which is what its caller
// hears (its processes die with it; the exit status they got from that is
// not the command's own).
func errDeletedWhileRunning(id, what string) error {
	return errdefs.NotFound("sandbox %q was deleted while %s ran", id, what)
}

// KillProcess implements session.Service.
func (m *Manager) KillProcess(ctx context.Context, id, procID string, sig int) error {
	_, bp, err := m.proc(id, procID)
	if err != nil {
		return err
	}
	bp.mu.Lock()
	pr := bp.proc
	bp.mu.Unlock()
	if pr == nil {
		return errdefs.Conflict("process %s has already exited", procID)
	}
	if err := pr.Signal(sig); err != nil {
		return errdefs.Internal(err, "signal process")
	}
	return nil
}

// ProcessLogs implements session.Service.
func (m *Manager) ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	if stream != "stdout" && stream != "stderr" {
		return nil, errdefs.Invalid("stream must be stdout or stderr")
	}
	if offset < 0 {
		return nil, errdefs.Invalid("offset must not be negative")
	}
	if _, _, err := m.proc(id, procID); err != nil {
		return nil, err
	}
	f, err := os.Open(m.logPath(id, procID, stream))
	if err != nil {
		return nil, errdefs.Internal(err, "open process log")
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		f.Close()
		return nil, errdefs.Internal(err, "seek process log")
	}
	return f, nil
}

// FS implements session.Service.
func (m *Manager) FS(ctx context.Context, id string) (session.FS, error) {
	_, inst, err := m.session(id)
	if err != nil {
		return nil, err
	}
	return inst.FS(ctx)
}

// Dial implements session.Service.
func (m *Manager) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.Invalid("port %d out of range", port)
	}
	_, inst, err := m.session(id)
	if err != nil {
		return nil, err
	}
	return inst.Dial(ctx, port)
}

// SendProcessInput implements session.Service.
func (m *Manager) SendProcessInput(ctx context.Context, id, procID string, in api.ProcessInput) error {
	if in.Resize != nil {
		if err := session.CheckTermSize(*in.Resize); err != nil {
			return err
		}
	}
	_, bp, err := m.proc(id, procID)
	if err != nil {
		return err
	}
	bp.mu.Lock()
	pr, w, ended := bp.proc, bp.stdin, bp.result != nil
	if in.EOF {
		bp.stdin = nil // later input finds it closed
	}
	bp.mu.Unlock()
	switch {
	case ended:
		return errdefs.Conflict("process %s has ended", procID)
	case in.Resize != nil && !bp.rec.TTY:
		return errdefs.Invalid("process %s has no terminal", procID)
	case (len(in.Data) > 0 || in.EOF) && !bp.rec.OpenStdin:
		return errdefs.Invalid("process %s was started without open_stdin", procID)
	case (len(in.Data) > 0 || in.EOF) && w == nil:
		return errdefs.Conflict("the input of process %s is closed (or was lost in a restart of the node)", procID)
	}
	if in.Resize != nil {
		if pr == nil {
			return errdefs.Conflict("process %s is not attached", procID)
		}
		if err := pr.Resize(in.Resize.Cols, in.Resize.Rows); err != nil {
			return err
		}
	}
	if len(in.Data) > 0 {
		done := make(chan error, 1)
		go func() { _, err := w.Write(in.Data); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				return errdefs.Conflict("the input of process %s is closed", procID)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if in.EOF {
		return w.Close()
	}
	return nil
}
