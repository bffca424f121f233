package microvm

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/procio"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/backend/vm/guest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// execPacket is the agent's EXEC request for p: the container init's
// (initproto.ExecPacket) plus the terminal size.
func execPacket(p driver.ProcSpec) (*initproto.Packet, error) {
	if p.UID < 0 || p.GID < 0 {
		return nil, errdefs.Invalid("negative uid or gid")
	}
	req := initproto.ExecRequest{Args: p.Args, Env: p.Env, Cwd: p.Cwd, UID: p.UID, GID: p.GID, Groups: p.Groups,
		Tag: p.Tag, TTY: p.TTY != nil}
	if p.TTY != nil {
		if err := procio.CheckSize(p.TTY.Cols, p.TTY.Rows); err != nil {
			return nil, err
		}
	} else {
		req.OutputCap = p.OutputCap
	}
	pk, err := initproto.ExecPacket(req)
	if err != nil {
		return nil, err
	}
	if p.TTY != nil {
		pk.Add("cols", strconv.Itoa(p.TTY.Cols)).Add("rows", strconv.Itoa(p.TTY.Rows))
	}
	return pk, nil
}

// replyErr classifies an ERROR reply (errno and message) for op.
func replyErr(op string, r *initproto.Packet) error {
	if r.Op != "ERROR" {
		return errdefs.Internal(fmt.Errorf("unexpected reply %q", r.Op), "microvm: %s", op)
	}
	msg, _ := r.Get("msg")
	n, _ := r.Int("errno")
	en := syscall.Errno(n)
	cause := fmt.Errorf("%s: %w", msg, en)
	switch en {
	case unix.ENOENT, unix.ESRCH:
		return errdefs.Wrap(api.CodeNotFound, cause, "%s", op)
	case unix.EEXIST:
		return errdefs.Wrap(api.CodeAlreadyExists, cause, "%s", op)
	case unix.ENOTEMPTY, unix.EBUSY, unix.ETXTBSY:
		return errdefs.Wrap(api.CodeConflict, cause, "%s", op)
	case unix.ENOSPC, unix.EDQUOT:
		return errdefs.Wrap(api.CodeResourceExhausted, cause, "%s: writable layer full", op)
	case unix.EFBIG:
		return errdefs.Wrap(api.CodePayloadTooLarge, cause, "%s", op)
	case unix.ECONNREFUSED:
		return errdefs.Wrap(api.CodeUnavailable, cause, "%s: nothing listens there", op)
	case unix.ENOTDIR, unix.EISDIR, unix.EINVAL, unix.ELOOP, unix.ENAMETOOLONG,
		unix.EXDEV, unix.EACCES, unix.EPERM, unix.EROFS, unix.EMLINK:
		return errdefs.Wrap(api.CodeInvalidArgument, cause, "%s", op)
	}
	return errdefs.Internal(cause, "%s", op)
}

// Exec implements driver.Instance.
func (in *instance) Exec(ctx context.Context, p driver.ProcSpec, stdio driver.Stdio) (driver.Proc, error) {
	pk, err := execPacket(p)
	if err != nil {
		return nil, err
	}
	if p.Tag != "" && p.TTY == nil {
		// A background process's log files: the agent keeps their names with
		// the process, so a re-attach after a restart appends to them.
		for i, w := range []any{stdio.Stdout, stdio.Stderr} {
			if f, ok := w.(*os.File); ok && filepath.IsAbs(f.Name()) {
				pk.Add("log"+strconv.Itoa(i+1), f.Name())
			}
		}
	}
	ch, err := in.channel(ctx)
	if err != nil {
		return nil, err
	}
	// Without stdin the EOF goes right behind the request, in the same
	// write: the agent reads both in one wakeup.
	noStdin := stdio.Stdin == nil && p.TTY == nil
	if noStdin {
		err = ch.SendClosed(pk)
	} else {
		err = ch.Send(pk)
	}
	var r *initproto.Packet
	if err == nil {
		r, err = ch.Reply(ctx)
	}
	if err != nil {
		ch.Close()
		return nil, in.connErr(err)
	}
	switch r.Op {
	case "STARTED":
	case "ERROR":
		ch.Close()
		if step, ok := r.Get("step"); ok {
			n, _ := r.Int("errno")
			msg, _ := r.Get("msg")
			code := 126
			if syscall.Errno(n) == unix.ENOENT && step == "exec" {
				code = 127
			}
			return &doneProc{exit: driver.Exit{Code: code, StartErr: fmt.Sprintf("%s: %s", p.Args[0], msg)}}, nil
		}
		return nil, replyErr("exec", r)
	default:
		ch.Close()
		return nil, replyErr("exec", r)
	}
	pid, _ := r.Int("pid")
	// The caller may close its files once Exec returns (a background
	// process's logs "go to the process as they are"): pump into copies.
	var owned []*os.File
	for _, w := range []*io.Writer{&stdio.Stdout, &stdio.Stderr} {
		if f, ok := (*w).(*os.File); ok {
			if g, err := dupFile(f); err == nil {
				*w = g
				owned = append(owned, g)
			}
		}
	}
	pr := newProc(in, ch, int(pid), p.TTY != nil, stdio, noStdin)
	closeAfter(pr, owned)
	return pr, nil
}

// dupFile returns an *os.File of its own on f's open file.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}

// closeAfter closes files once pr's output copies are done.
func closeAfter(pr *proc, files []*os.File) {
	if len(files) == 0 {
		return
	}
	go func() {
		pr.outs.Wait()
		for _, f := range files {
			f.Close()
		}
	}()
}

// Attach implements driver.Instance.
func (in *instance) Attach(ctx context.Context, tag string, stdio driver.Stdio) (driver.Proc, error) {
	ch, err := in.channel(ctx)
	if err != nil {
		return nil, err
	}
	r, err := ch.Call(ctx, initproto.NewPacket("WAIT").Add("tag", tag))
	if err != nil {
		ch.Close()
		return nil, in.connErr(err)
	}
	switch r.Op {
	case "EXITED":
		ch.Close()
		ex, err := exitOf(r)
		if err != nil {
			return nil, err
		}
		return &doneProc{exit: ex}, nil
	case "RUNNING":
		pid, _ := r.Int("pid")
		tty, _ := r.Get("tty")
		var logs []*os.File
		if tty != "1" {
			// Its output went to the files given at start: the agent pumps it
			// on into them (what it wrote while no host was attached is lost).
			stdio = driver.Stdio{}
			for i, k := range []string{"log1", "log2"} {
				if name, ok := r.Get(k); ok && filepath.IsAbs(name) {
					if f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0); err == nil {
						logs = append(logs, f)
						if i == 0 {
							stdio.Stdout = f
						} else {
							stdio.Stderr = f
						}
					}
				}
			}
		}
		pr := newProc(in, ch, int(pid), tty == "1", stdio, false)
		closeAfter(pr, logs)
		return pr, nil
	}
	ch.Close()
	if r.Op == "ERROR" {
		if n, _ := r.Int("errno"); syscall.Errno(n) == unix.ESRCH {
			return nil, errdefs.NotFound("process %q not found in sandbox", tag)
		}
	}
	return nil, replyErr("attach "+tag, r)
}

func exitOf(r *initproto.Packet) (driver.Exit, error) {
	var v [4]int64
	for i, k := range []string{"status", "utime_us", "stime_us", "maxrss_kb"} {
		n, err := r.Int(k)
		if err != nil {
			return driver.Exit{}, errdefs.Internal(err, "microvm: exit")
		}
		v[i] = n
	}
	ws := syscall.WaitStatus(uint32(v[0]))
	ex := driver.Exit{CPUTime: time.Duration(v[1]+v[2]) * time.Microsecond, MaxRSS: v[3] << 10}
	switch {
	case ws.Exited():
		ex.Code = ws.ExitStatus()
	case ws.Signaled():
		ex.Code = -1
		ex.Signal = int(ws.Signal())
	}
	return ex, nil
}

// proc is a process in the guest, on its own channel.
type proc struct {
	in   *instance
	ch   *guest.Chan
	pid  int
	tty  bool
	outs sync.WaitGroup
	mu   sync.Mutex
	exit *driver.Exit
}

// newProc follows a started process on ch; stdinClosed says its stdin's
// EOF was already sent.
func newProc(in *instance, ch *guest.Chan, pid int, tty bool, stdio driver.Stdio, stdinClosed bool) *proc {
	p := &proc{in: in, ch: ch, pid: pid, tty: tty}
	outs := []io.Writer{stdio.Stdout, stdio.Stderr}
	n := 2
	if tty {
		n = 1
	}
	for i := 0; i < n; i++ {
		w := outs[i]
		if w == nil {
			w = io.Discard
		}
		p.outs.Add(1)
		go func(s int) {
			defer p.outs.Done()
			_, _ = io.Copy(w, ch.Stream(s))
		}(i + 1)
	}
	if stdio.Stdin != nil {
		go func() {
			_, _ = io.Copy(ch, stdio.Stdin)
			_ = ch.CloseWrite()
		}()
	} else if !tty && !stdinClosed {
		_ = ch.CloseWrite()
	}
	return p
}

func (p *proc) PID() int { return p.pid }

// Wait implements driver.Proc: the agent sends EXITED after the output's
// end, so the copies finish right after it.
func (p *proc) Wait(ctx context.Context) (driver.Exit, error) {
	p.mu.Lock()
	if p.exit != nil {
		ex := *p.exit
		p.mu.Unlock()
		return ex, nil
	}
	p.mu.Unlock()
	for {
		r, err := p.ch.Reply(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return driver.Exit{}, ctx.Err()
			}
			if driver.Exited(p.in) {
				return driver.Exit{Code: -1, Signal: int(unix.SIGKILL)}, nil
			}
			return driver.Exit{}, p.in.connErr(err)
		}
		if r.Op != "EXITED" {
			continue
		}
		ex, err := exitOf(r)
		if err != nil {
			return driver.Exit{}, err
		}
		done := make(chan struct{})
		go func() { p.outs.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		p.mu.Lock()
		p.exit = &ex
		p.mu.Unlock()
		return ex, nil
	}
}

// Signal implements driver.Proc (the agent picks the terminal's foreground
// group for a terminal process).
func (p *proc) Signal(sig int) error {
	if sig < 0 || sig >= 65 {
		return errdefs.Invalid("signal %d out of range", sig)
	}
	if err := p.ch.Send(initproto.NewPacket("KILL").Add("sig", strconv.Itoa(sig))); err != nil {
		return p.in.connErr(err)
	}
	return nil
}

// Resize implements driver.Proc.
func (p *proc) Resize(cols, rows int) error {
	if !p.tty {
		return procio.NoTTY()
	}
	if err := procio.CheckSize(cols, rows); err != nil {
		return err
	}
	if err := p.ch.Send(initproto.NewPacket("RESIZE").Add("cols", strconv.Itoa(cols)).Add("rows", strconv.Itoa(rows))); err != nil {
		return p.in.connErr(err)
	}
	return nil
}

// Close implements driver.Proc: the channel goes, the process stays.
func (p *proc) Close() error {
	_ = p.ch.Close()
	return nil
}

// doneProc is a process that already ended (a failed start, an attach to
// an exit record).
type doneProc struct{ exit driver.Exit }

func (d *doneProc) PID() int                                  { return 0 }
func (d *doneProc) Wait(context.Context) (driver.Exit, error) { return d.exit, nil }
func (d *doneProc) Signal(int) error                          { return nil }
func (d *doneProc) Resize(int, int) error                     { return procio.NoTTY() }
func (d *doneProc) Close() error                              { return nil }
