package agent

import (
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

	"github.com/dsec-dev/dsec/internal/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/session/hostfs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// bgProc is a background process. Its output goes to files in the agent's data dir
// (so it survives an agent restart); the init keeps its exit status by tag.
type bgProc struct {
	rec  procRecord
	done chan struct{}

	mu     sync.Mutex
	proc   driver.Proc
	result *api.ExecResult
}

func (p *bgProc) view() api.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return api.Process{ID: p.rec.ID, PID: p.rec.PID, Cmd: p.rec.Cmd, Running: p.result == nil,
		StartedAt: p.rec.StartedAt, Result: p.result}
}

func (p *bgProc) closeConn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil {
		p.proc.Close()
	}
}

func (m *Manager) logDir(id string) string { return paths.New(m.cfg.DataDir).Logs(id) }

func (m *Manager) logPath(id, procID, stream string) string {
	return filepath.Join(m.logDir(id), procID+"."+stream)
}

// StartProcess implements session.Service.
func (m *Manager) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	if _, err := session.TermSizeOf(req); err != nil {
		return api.Process{}, err
	}
	sb, inst, err := m.session(id)
	if err != nil {
		return api.Process{}, err
	}
	if req.TTY {
		return api.Process{}, sb.noTTY()
	}
	stdin, err := stdinBytes(req)
	if err != nil {
		return api.Process{}, err
	}
	if req.TimeoutMs < 0 {
		return api.Process{}, errdefs.Invalid("timeout_ms must not be negative")
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
	var stdio [3]*os.File
	defer func() {
		for _, f := range stdio {
			if f != nil {
				f.Close()
			}
		}
	}()
	var stdinW *os.File
	if len(stdin) > 0 {
		if stdio[0], stdinW, err = os.Pipe(); err != nil {
			return api.Process{}, errdefs.Internal(err, "pipe")
		}
	} else if stdio[0], err = os.Open(os.DevNull); err != nil {
		return api.Process{}, errdefs.Internal(err, "open /dev/null")
	}
	for i, s := range []string{"stdout", "stderr"} {
		f, err := os.OpenFile(m.logPath(id, procID, s), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
		if err != nil {
			return api.Process{}, errdefs.Internal(err, "create log file")
		}
		stdio[i+1] = f
	}
	pr, err := inst.Exec(ctx, spec, stdio)
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		return api.Process{}, err
	}
	if stdinW != nil {
		go func() {
			_, _ = stdinW.Write(stdin)
			stdinW.Close()
		}()
	}
	bp := &bgProc{rec: procRecord{ID: procID, PID: pr.PID(), Cmd: spec.Args, StartedAt: m.now().UTC()},
		done: make(chan struct{}), proc: pr}
	sb.mu.Lock()
	sb.procs[procID] = bp
	sb.rec.Procs = append(sb.rec.Procs, bp.rec)
	err = sb.save()
	sb.mu.Unlock()
	if err != nil {
		_ = pr.Signal(9)
		return api.Process{}, err
	}
	go sb.watchProc(bp, pr, time.Duration(req.TimeoutMs)*time.Millisecond)
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
	bp.mu.Unlock()
	close(bp.done)
}

// reattachProcs re-connects to the background processes of an adopted sandbox.
func (sb *sandbox) reattachProcs() {
	for _, r := range sb.rec.Procs {
		bp := &bgProc{rec: r, done: make(chan struct{})}
		sb.procs[r.ID] = bp
		pr, err := sb.inst.Attach(context.Background(), r.ID)
		if err != nil {
			res := api.ExecResult{ExitCode: -1, Error: "exit status lost: " + err.Error()}
			bp.result = &res
			close(bp.done)
			continue
		}
		bp.proc = pr
		go sb.watchProc(bp, pr, 0)
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
	_, bp, err := m.proc(id, procID)
	if err != nil {
		return api.Process{}, err
	}
	select {
	case <-bp.done:
	case <-ctx.Done():
	}
	return bp.view(), nil
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
	root, err := inst.Root()
	if err != nil {
		return nil, err
	}
	return hostfs.New(fsops.New(root)), nil
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
