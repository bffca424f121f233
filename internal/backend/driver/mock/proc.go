package mock

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/procio"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// hostProc is a process on the host, kept by the Host (for a tagged one, also
// after it exited, like the init's exit records).
type hostProc struct {
	pid    int
	tty    bool
	exited chan struct{}
	exit   driver.Exit

	mu     sync.Mutex
	master *os.File // a tagged terminal's master, kept for Attach
}

func (p *hostProc) kill() {
	_ = unix.Kill(-p.pid, unix.SIGKILL)
	p.mu.Lock()
	m := p.master
	p.mu.Unlock()
	if m != nil {
		// Jobs a shell put into other process groups of its session.
		if pg, err := procio.Foreground(m); err == nil {
			_ = unix.Kill(-pg, unix.SIGKILL)
		}
	}
}

func (p *hostProc) releaseMaster() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.master != nil {
		p.master.Close()
		p.master = nil
	}
}

// dupMaster returns a new handle on the kept master, or nil.
func (p *hostProc) dupMaster() (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.master == nil {
		return nil, nil
	}
	fd, err := unix.FcntlInt(p.master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "pty-master"), nil
}

// lookPath finds arg0 the way the container init does: a name with a '/' is a
// path (relative to the working directory), anything else is searched in the
// process's own PATH. stat looks at a candidate (host paths, or in rooted mode
// the sandbox's).
func lookPath(arg0, dir string, env []string, stat func(string) (os.FileInfo, error)) (string, error) {
	if strings.Contains(arg0, "/") {
		return arg0, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	eacces := false
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		c := filepath.Join(d, arg0)
		if !filepath.IsAbs(c) {
			c = filepath.Join(dir, c)
		}
		st, err := stat(c)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 == 0 {
			eacces = true
			continue
		}
		return c, nil
	}
	if eacces {
		return "", fs.ErrPermission
	}
	return "", fs.ErrNotExist
}

func startFailure(arg0 string, err error) driver.Exit {
	code := 126
	if errors.Is(err, fs.ErrNotExist) {
		code = 127
	}
	return driver.Exit{Code: code, StartErr: arg0 + ": " + err.Error()}
}

// Exec implements driver.Instance.
func (in *instance) Exec(ctx context.Context, p driver.ProcSpec, stdio driver.Stdio) (driver.Proc, error) {
	if len(p.Args) == 0 || p.Args[0] == "" {
		return nil, errdefs.Invalid("mock: exec without a command")
	}
	if in.b.exited() {
		return nil, in.gone()
	}
	if p.TTY != nil {
		if !in.d.Capabilities().TTY {
			return nil, errdefs.New(api.CodeNotImplemented, "backend %q has no terminals", in.d.Name())
		}
		if err := procio.CheckSize(p.TTY.Cols, p.TTY.Rows); err != nil {
			return nil, err
		}
	}
	b := in.b
	if err := b.lockThawed(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if b.destroyed {
		return nil, in.gone()
	}
	if old := b.procs[p.Tag]; p.Tag != "" && old != nil {
		select {
		case <-old.exited:
			old.releaseMaster()
			delete(b.procs, p.Tag)
		default:
			return nil, errdefs.Conflict("mock: tag %q in use by a running process", p.Tag)
		}
	}
	dir := filepath.Join(b.root, filepath.Clean("/"+p.Cwd))
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if err == nil {
			err = syscall.ENOTDIR
		}
		return &doneProc{exit: driver.Exit{Code: 127, StartErr: "chdir " + p.Cwd + ": " + err.Error()}}, nil
	}
	stat, lookDir := os.Stat, dir
	if in.d.chrooted() {
		stat = func(c string) (os.FileInfo, error) { return statIn(b.root, c) }
		lookDir = filepath.Clean("/" + p.Cwd)
	}
	path, err := lookPath(p.Args[0], lookDir, p.Env, stat)
	if err != nil {
		return &doneProc{exit: startFailure(p.Args[0], err)}, nil
	}
	cmd := &exec.Cmd{Path: path, Args: p.Args, Env: append([]string{}, p.Env...), Dir: dir}
	hp := &hostProc{tty: p.TTY != nil, exited: make(chan struct{})}
	pr := &proc{hp: hp}
	var cleanup func()
	if p.TTY != nil {
		fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil, errdefs.Internal(err, "mock: open /dev/ptmx")
		}
		master, slave, err := procio.NewPTY(fd, p.TTY.Cols, p.TTY.Rows)
		if err != nil {
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		pr.term = procio.NewTerm(master)
		cleanup = func() { slave.Close() }
		if p.Tag != "" {
			keep, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				slave.Close()
				master.Close()
				return nil, errdefs.Internal(err, "mock: keep the terminal")
			}
			hp.master = os.NewFile(uintptr(keep), "pty-master")
		}
	} else {
		pipes, err := procio.Open(stdio)
		if err != nil {
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = pipes.Child[0], pipes.Child[1], pipes.Child[2]
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		pr.pipes = pipes
		cleanup = pipes.CloseChild
	}
	if in.d.chrooted() {
		root(cmd, b.root, p.Cwd, p.UID, p.GID, p.Groups)
	}
	err = cmd.Start()
	cleanup()
	if err != nil {
		pr.Close()
		hp.releaseMaster()
		return &doneProc{exit: startFailure(p.Args[0], err)}, nil
	}
	hp.pid = cmd.Process.Pid
	if pr.pipes != nil {
		pr.pipes.Start()
	} else {
		pr.term.Start(stdio.Stdin, stdio.Stdout)
	}
	b.running[hp] = true
	if p.Tag != "" {
		b.procs[p.Tag] = hp
	}
	go b.reap(hp, cmd)
	return pr, nil
}

// reap waits for a process and records its exit.
func (b *box) reap(hp *hostProc, cmd *exec.Cmd) {
	err := cmd.Wait()
	var ex driver.Exit
	if st := cmd.ProcessState; st != nil {
		ws := st.Sys().(syscall.WaitStatus)
		switch {
		case ws.Exited():
			ex.Code = ws.ExitStatus()
		case ws.Signaled():
			ex.Code, ex.Signal = -1, int(ws.Signal())
		}
		ex.CPUTime = st.UserTime() + st.SystemTime()
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			ex.MaxRSS = ru.Maxrss << 10
		}
	} else {
		ex = driver.Exit{Code: -1, StartErr: "wait: " + err.Error()}
	}
	hp.exit = ex
	b.mu.Lock()
	delete(b.running, hp)
	b.mu.Unlock()
	close(hp.exited)
}

// Attach implements driver.Instance.
func (in *instance) Attach(ctx context.Context, tag string, stdio driver.Stdio) (driver.Proc, error) {
	if in.b.exited() {
		return nil, in.gone()
	}
	in.b.mu.Lock()
	hp := in.b.procs[tag]
	in.b.mu.Unlock()
	if hp == nil {
		return nil, errdefs.NotFound("process %q not found in sandbox", tag)
	}
	pr := &proc{hp: hp}
	m, err := hp.dupMaster()
	if err != nil {
		return nil, errdefs.Internal(err, "mock: attach to the terminal")
	}
	if m != nil {
		pr.term = procio.NewTerm(m)
		pr.term.Start(stdio.Stdin, stdio.Stdout)
	}
	return pr, nil
}

// proc is a driver's handle on a host process.
type proc struct {
	hp    *hostProc
	pipes *procio.Pipes
	term  *procio.Term
	once  sync.Once
}

func (p *proc) PID() int { return p.hp.pid }

// Wait implements driver.Proc.
func (p *proc) Wait(ctx context.Context) (driver.Exit, error) {
	select {
	case <-p.hp.exited:
	case <-ctx.Done():
		return driver.Exit{}, ctx.Err()
	}
	if p.pipes != nil {
		p.pipes.Drain(procio.DrainGrace)
	}
	if p.term != nil {
		p.term.Drain(procio.DrainGrace)
	}
	return p.hp.exit, nil
}

// Signal implements driver.Proc.
func (p *proc) Signal(sig int) error {
	select {
	case <-p.hp.exited:
		return nil // the pid may be reused now
	default:
	}
	group := func(sig int) error {
		if err := unix.Kill(-p.hp.pid, unix.Signal(sig)); err != nil && err != unix.ESRCH {
			return errdefs.Internal(err, "signal process")
		}
		return nil
	}
	if p.term != nil {
		return p.term.Signal(sig, group)
	}
	return group(sig)
}

// Resize implements driver.Proc.
func (p *proc) Resize(cols, rows int) error {
	if p.term == nil {
		return procio.NoTTY()
	}
	return p.term.Resize(cols, rows)
}

// Close implements driver.Proc.
func (p *proc) Close() error {
	p.once.Do(func() {
		if p.pipes != nil {
			p.pipes.Close()
		}
		if p.term != nil {
			p.term.Close()
		}
	})
	return nil
}

// doneProc is a process that never started.
type doneProc struct{ exit driver.Exit }

func (d *doneProc) PID() int                                  { return 0 }
func (d *doneProc) Wait(context.Context) (driver.Exit, error) { return d.exit, nil }
func (d *doneProc) Signal(int) error                          { return nil }
func (d *doneProc) Resize(int, int) error                     { return procio.NoTTY() }
func (d *doneProc) Close() error                              { return nil }
