package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/procio"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/session/hostfs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// instance is one running container sandbox.
type instance struct {
	d     *Driver
	id    string
	st    state
	raw   json.RawMessage
	cg    *cgroups.Group
	pidfd *os.File // nonblocking pidfd, readable once init exits
	child bool     // started by this process: it must reap the init
	// life ends (end) when the init has exited; done is its Done.
	life context.Context
	end  context.CancelFunc
	done <-chan struct{}
	idle idleConns
	ooms oomTally

	// cpu is the sandbox's CPU limit in cores, written to its cgroup before
	// its first process starts rather than at create: every such write
	// walks all CPU cgroups of the host (cgroups.Group.SetCPU).
	cpu    float64
	cpuMu  sync.Mutex
	cpuSet atomic.Bool

	destroyOnce sync.Once
	destroyErr  error
}

var _ driver.Instance = (*instance)(nil)
var _ driver.Pauser = (*instance)(nil)
var _ driver.IDMapped = (*instance)(nil)

// IDMap implements driver.IDMapped.
func (in *instance) IDMap() (uint32, uint32) { return in.st.IDBase, in.st.IDSize }

func (d *Driver) newInstance(spec driver.Spec, st state, cg *cgroups.Group, child bool) (*instance, error) {
	fd, err := unix.PidfdOpen(st.PID, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", st.PID, err)
	}
	raw, _ := json.Marshal(st)
	in := &instance{
		d: d, id: spec.ID, st: st, raw: raw, cg: cg,
		pidfd: os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", st.PID)),
		child: child, cpu: spec.CPU,
	}
	in.life, in.end = context.WithCancel(context.Background())
	in.done = in.life.Done()
	in.ooms.read = cg.OOMKills
	go in.watch()
	return in, nil
}

// watch waits in the netpoller (no thread per sandbox) for the init to exit.
func (in *instance) watch() {
	defer in.end()
	defer in.idle.closeAll()
	rc, err := in.pidfd.SyscallConn()
	if err != nil {
		return
	}
	// Each call looks at the pidfd itself. RawRead resets the poller's
	// readiness before the first call, so an exit the poller saw before
	// then (an init killed right after Start returned, or already dead when
	// the pidfd was registered) leaves no edge to wait for: a wait without
	// this look never ends, and the init stays a zombie nobody reaps.
	_ = rc.Read(func(fd uintptr) bool { return pidfdExited(int(fd)) })
	if in.child {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(in.st.PID, &ws, 0, nil)
			if err != unix.EINTR {
				break
			}
		}
	}
}

// pidfdExited reports whether the process of pidfd fd has exited (the pidfd
// is readable), without waiting.
func pidfdExited(fd int) bool {
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && pfd[0].Revents != 0
	}
}

func (in *instance) ID() string                  { return in.id }
func (in *instance) State() json.RawMessage      { return in.raw }
func (in *instance) Done() <-chan struct{}       { return in.done }
func (in *instance) PID() int                    { return in.st.PID }
func (in *instance) Cgroup() *cgroups.Group      { return in.cg }
func (in *instance) socket() string              { return in.d.socket(in.id) }
func (in *instance) alive() bool                 { return !driver.Exited(in) }
func (in *instance) MemoryUsage() (int64, error) { return in.cg.MemoryUsage() }

func (in *instance) gone() error {
	return errdefs.New(api.CodeSandboxGone, "sandbox %s: its init process has exited", in.id)
}

func (in *instance) dial(ctx context.Context) (*initproto.Conn, error) {
	if !in.alive() {
		return nil, in.gone()
	}
	c, err := initproto.Dial(ctx, in.socket())
	if err != nil {
		if !in.alive() {
			return nil, in.gone()
		}
		return nil, errdefs.Internal(err, "connect to sandbox init")
	}
	return c, nil
}

// Exec implements driver.Instance.
func (in *instance) Exec(ctx context.Context, p driver.ProcSpec, stdio driver.Stdio) (driver.Proc, error) {
	if p.TTY != nil {
		return in.execTTY(ctx, p, stdio)
	}
	if stdio.Stdin == nil && in.d.devnull != nil {
		// the driver's /dev/null rather than an open and close per exec
		stdio.Stdin = in.d.devnull
	}
	pipes, err := procio.Open(stdio)
	if err != nil {
		return nil, err
	}
	pr, err := in.exec(ctx, p, pipes.Child, nil)
	pipes.CloseChild()
	if err != nil {
		pipes.Close()
		return nil, err
	}
	if cp, ok := pr.(*proc); ok {
		cp.pipes = pipes
		pipes.Start()
	} else {
		pipes.Close()
	}
	return pr, nil
}

// applyCPU writes the sandbox's CPU limit once, before its first process
// starts (after a restart of the agent again, harmlessly: the same value).
// Until then only the idle init runs in the cgroup.
func (in *instance) applyCPU() error {
	if in.cpu == 0 || in.cpuSet.Load() {
		return nil
	}
	in.cpuMu.Lock()
	defer in.cpuMu.Unlock()
	if in.cpuSet.Load() {
		return nil
	}
	if err := in.cg.SetCPU(in.cpu); err != nil {
		if !in.alive() {
			return in.gone()
		}
		return errdefs.Internal(err, "set the sandbox's cpu limit")
	}
	in.cpuSet.Store(true)
	return nil
}

// exec asks the init to start p with the given fds (and, for a tagged terminal
// process, the master the init keeps).
func (in *instance) exec(ctx context.Context, p driver.ProcSpec, fds [3]*os.File, master *os.File) (driver.Proc, error) {
	if err := in.applyCPU(); err != nil {
		return nil, err
	}
	c, pooled, err := in.conn(ctx)
	if err != nil {
		return nil, err
	}
	ooms := in.ooms.start()
	req := initproto.ExecRequest{
		Args: p.Args, Env: p.Env, Cwd: p.Cwd, UID: p.UID, GID: p.GID, Groups: p.Groups, Tag: p.Tag,
		TTY: p.TTY != nil, Master: master, OutputCap: outputCap(p),
	}
	pid, err := c.Exec(ctx, req, fds)
	if pooled && olderInit(err) {
		// an init from before connection reuse: one connection per exec
		c.Close()
		in.idle.disable()
		if c, err = in.dial(ctx); err != nil {
			return nil, err
		}
		pid, err = c.Exec(ctx, req, fds)
	}
	if err != nil {
		var ee *initproto.ExecError
		if errors.As(err, &ee) {
			in.idle.put(c)
			return &failedProc{exit: startFailure(p.Args[0], ee)}, nil
		}
		c.Close()
		if !in.alive() {
			return nil, in.gone()
		}
		return nil, errdefs.Internal(err, "exec in sandbox")
	}
	return &proc{in: in, c: c, pid: pid, oomsBefore: ooms}, nil
}

// outputCap is the cap the init applies: a terminal's output is capped by the
// driver's pump instead (procio.Term), the init only pumps pipes.
func outputCap(p driver.ProcSpec) int64 {
	if p.TTY != nil {
		return 0
	}
	return p.OutputCap
}

// startFailure turns a failed exec into the exit a shell would report.
func startFailure(arg0 string, ee *initproto.ExecError) driver.Exit {
	code := 126
	if ee.Errno == unix.ENOENT {
		code = 127
	}
	msg := ee.Msg
	if msg == "" {
		msg = ee.Errno.Error()
	}
	return driver.Exit{Code: code, StartErr: fmt.Sprintf("%s: %s", arg0, msg)}
}

// Attach implements driver.Instance.
func (in *instance) Attach(ctx context.Context, tag string, stdio driver.Stdio) (driver.Proc, error) {
	c, err := in.dial(ctx)
	if err != nil {
		return nil, err
	}
	pid, running, exit, err := c.Attach(ctx, tag)
	if err != nil {
		c.Close()
		if errors.Is(err, unix.ESRCH) {
			return nil, errdefs.NotFound("process %q not found in sandbox", tag)
		}
		return nil, errdefs.Internal(err, "attach to process %q", tag)
	}
	p := &proc{in: in, c: c, pid: pid, oomsBefore: unknownOOMs}
	if !running && exit != nil {
		p.final = exit
	}
	if m := c.TakeMaster(); m != nil {
		p.term = procio.NewTerm(m)
		p.term.Start(stdio.Stdin, stdio.Stdout)
	}
	return p, nil
}

// root opens the sandbox's root directory (O_PATH) through /proc/PID/root.
func (in *instance) root() (*os.File, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/root", in.st.PID), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil || !in.alive() {
		if f != nil {
			f.Close()
		}
		if !in.alive() {
			return nil, in.gone()
		}
		return nil, errdefs.Internal(err, "open sandbox root")
	}
	// The pid could have been reused between the liveness check and the open:
	// check again through the pidfd, which cannot be fooled by reuse.
	if err := unix.PidfdSendSignal(int(in.pidfd.Fd()), 0, nil, 0); err != nil {
		f.Close()
		return nil, in.gone()
	}
	return f, nil
}

// FS implements driver.Instance: every path resolves inside the sandbox's root
// with openat2(RESOLVE_IN_ROOT) (internal/fsops).
func (in *instance) FS(ctx context.Context) (session.FS, error) {
	root, err := in.root()
	if err != nil {
		return nil, err
	}
	// In a user namespace, what the host creates gets the sandbox root's mapped
	// owner (the file systems that namespace mounted refuse host root).
	fs := fsops.New(root)
	if base, size := in.IDMap(); size > 0 {
		fs = fsops.NewMapped(root, fsops.IDMap{HostID: base, Size: size})
	}
	fs.SetHoleBudget(in.diskLimit())
	return hostfs.New(fs), nil
}

// Pause implements driver.Pauser.
func (in *instance) Pause(ctx context.Context) error {
	if err := in.cg.Freeze(ctx); err != nil {
		return errdefs.Internal(err, "freeze sandbox")
	}
	return nil
}

// Resume implements driver.Pauser.
func (in *instance) Resume(ctx context.Context) error {
	if err := in.cg.Thaw(ctx); err != nil {
		return errdefs.Internal(err, "thaw sandbox")
	}
	return nil
}

// Destroy implements driver.Instance.
func (in *instance) Destroy(ctx context.Context) error {
	in.destroyOnce.Do(func() {
		in.idle.closeAll()
		// Thaw first: a frozen (or still freezing: Frozen() says false
		// then) init and its processes cannot die.
		_ = in.cg.Thaw(ctx)
		_ = unix.PidfdSendSignal(int(in.pidfd.Fd()), unix.SIGKILL, nil, 0)
		select {
		case <-in.done:
		case <-ctx.Done():
			in.destroyErr = errdefs.Internal(ctx.Err(), "wait for sandbox init to exit")
			return
		case <-time.After(30 * time.Second):
			why := stuckReport(in.st.PID, in.cg)
			in.d.log.Error("sandbox init did not exit within 30 s of SIGKILL", "sandbox", in.id, "state", why)
			in.destroyErr = errdefs.Internal(errors.New("timeout"), "wait for sandbox init to exit (%s)", why)
			return
		}
		in.pidfd.Close()
		in.destroyErr = in.d.release(ctx, in.id)
		in.d.ids.free(in.st.IDBase, in.id)
	})
	return in.destroyErr
}

func closeFD(fd int) { unix.Close(fd) }

func killPID(pid int) error { return unix.Kill(pid, unix.SIGKILL) }

// killAndReap ends a child init we could not take into service.
func killAndReap(pid int) {
	_ = unix.Kill(pid, unix.SIGKILL)
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, 0, nil)
}
