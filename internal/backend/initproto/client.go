package initproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ExecRequest describes a process for the init to start.
type ExecRequest struct {
	Args, Env []string // Args[0] is searched in Env's PATH when it has no '/'
	Cwd       string   // "" means /
	UID, GID  int
	Groups    []int
	Tag       string // names a background process for Attach, Signal and PS
	// TTY: the stdio fds are a terminal's slave, which becomes the process's
	// controlling terminal (setsid, TIOCSCTTY).
	TTY bool
	// Master, for a tagged TTY process, is the terminal's master end: the init
	// keeps a copy and hands it to every later Attach, so the terminal outlives
	// the caller.
	Master *os.File
	// OutputCap > 0 makes the init pump stdout and stderr into the given
	// files itself, at most OutputCap bytes each, then a truncation marker
	// (the rest is read and dropped, so the process never blocks on it).
	OutputCap int64
}

// Exit says how a process ended.
type Exit struct {
	Status       syscall.WaitStatus
	UTime, STime time.Duration
	MaxRSSKB     int64
}

// TaggedProc is one PS entry.
type TaggedProc struct {
	Tag     string
	PID     int // in the sandbox's PID namespace
	Running bool
}

// MaxReply is the largest reply the init sends (REPLY_MAX in
// csrc/common/proto.h; PS is split into packets of at most this size).
const MaxReply = 64 << 10

// Conn is one control connection to a sandbox init. It carries at most one
// process at a time; once Wait returned its exit, Reusable says whether the
// connection can Exec again. Kill may be called concurrently with Wait;
// other calls are serialized.
type Conn struct {
	uc  *net.UnixConn
	wmu sync.Mutex // a write and its deadline
	// broken: a send or receive failed (or was cancelled), so a reply may
	// still be on its way: the connection must not carry another exchange.
	broken atomic.Bool
	mu     sync.Mutex // one exchange or Wait at a time; guards the fields below
	buf    []byte     // MaxReply bytes, allocated on the first receive
	oob    []byte
	// exit is an EXITED that arrived while another reply was awaited, or the
	// exit Attach found, kept for Wait.
	exit *Exit
	proc bool // a process is attached and its exit not yet returned
	// master is the terminal master the last Attach received (TakeMaster).
	master *os.File
}

// Dial connects to the init's control socket.
func Dial(ctx context.Context, socketPath string) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", socketPath)
	if err != nil {
		return nil, fmt.Errorf("initproto: dial: %w", err)
	}
	return &Conn{uc: nc.(*net.UnixConn)}, nil
}

// Close closes the connection. A running process keeps running.
func (c *Conn) Close() error { return c.uc.Close() }

// Reusable reports whether the connection can carry another Exec: no
// process is attached (Wait returned its exit, or none was started), no
// reply is pending and no terminal master is held. An init older than
// connection reuse refuses the second EXEC with EBUSY (a *RemoteError).
// It never blocks: a connection with an exchange or Wait in flight (which
// closing it would end) is not reusable.
func (c *Conn) Reusable() bool {
	if !c.mu.TryLock() {
		return false
	}
	defer c.mu.Unlock()
	return !c.broken.Load() && !c.proc && c.exit == nil && c.master == nil
}

func (c *Conn) send(ctx context.Context, p *Packet, oob []byte) error {
	b, err := p.Encode()
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	dl, _ := ctx.Deadline()
	_ = c.uc.SetWriteDeadline(dl)
	if _, _, err := c.uc.WriteMsgUnix(b, oob, nil); err != nil {
		c.broken.Store(true)
		return fmt.Errorf("initproto: send %s: %w", p.Op, ctxErr(ctx, err))
	}
	return nil
}

// read receives one packet. c.mu must be held.
func (c *Conn) read(ctx context.Context) (*Packet, error) {
	p, fds, err := c.readFDs(ctx)
	for _, fd := range fds {
		syscall.Close(fd)
	}
	return p, err
}

// readFDs receives one packet and the fds sent with it, which the caller
// owns. c.mu must be held.
func (c *Conn) readFDs(ctx context.Context) (*Packet, []int, error) {
	if c.buf == nil {
		c.buf = make([]byte, MaxReply)
		c.oob = make([]byte, syscall.CmsgSpace(4*4))
	}
	oob := c.oob
	stop := watchCtx(ctx, c.uc.SetReadDeadline)
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(c.buf, oob)
	stop()
	var fds []int
	if oobn > 0 {
		if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				if fs, err := syscall.ParseUnixRights(&m); err == nil {
					fds = append(fds, fs...)
				}
			}
		}
	}
	p, err := c.parseRead(ctx, n, flags, err)
	if err != nil {
		c.broken.Store(true)
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, nil, err
	}
	return p, fds, nil
}

func (c *Conn) parseRead(ctx context.Context, n, flags int, err error) (*Packet, error) {
	if err != nil {
		return nil, fmt.Errorf("initproto: receive: %w", ctxErr(ctx, err))
	}
	if n == 0 {
		return nil, fmt.Errorf("initproto: receive: init closed the connection: %w", io.ErrUnexpectedEOF)
	}
	if flags&syscall.MSG_TRUNC != 0 {
		return nil, errors.New("initproto: receive: reply too large")
	}
	return ParsePacket(c.buf[:n])
}

// exchange sends p and returns the first reply that is not a stray EXITED
// (those are kept for Wait). c.mu must be held.
func (c *Conn) exchange(ctx context.Context, p *Packet, oob []byte) (*Packet, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.send(ctx, p, oob); err != nil {
		return nil, err
	}
	for {
		r, err := c.read(ctx)
		if err != nil {
			return nil, err
		}
		if r.Op != "EXITED" || p.Op == "WAIT" {
			return r, nil
		}
		e, err := parseExit(r)
		if err != nil {
			return nil, err
		}
		c.exit = &e
	}
}

// remoteErr converts an ERROR reply, classifying the common errnos.
func remoteErr(op string, r *Packet) error {
	errno, msg := errorReply(r)
	e := &RemoteError{Op: op, Errno: errno, Msg: msg}
	switch errno {
	case syscall.ESRCH:
		return errdefs.Wrap(api.CodeNotFound, e, "initproto")
	case syscall.EINVAL, syscall.EMSGSIZE:
		return errdefs.Wrap(api.CodeInvalidArgument, e, "initproto")
	case syscall.EEXIST, syscall.EBUSY:
		return errdefs.Wrap(api.CodeConflict, e, "initproto")
	}
	return e
}

func unexpected(op string, r *Packet) error {
	return fmt.Errorf("initproto: unexpected reply %q to %s", r.Op, op)
}

// dupFiles duplicates the stdio fds (nil means /dev/null) so that sending them
// does not change the callers' files (os.File.Fd would make them blocking).
func dupFiles(stdio []*os.File) (fds []int, err error) {
	var devnull *os.File
	defer func() {
		if devnull != nil {
			devnull.Close()
		}
		if err != nil {
			for _, fd := range fds {
				syscall.Close(fd)
			}
			fds = nil
		}
	}()
	for _, f := range stdio {
		if f == nil {
			if devnull == nil {
				if devnull, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
					return fds, fmt.Errorf("initproto: %w", err)
				}
			}
			f = devnull
		}
		rc, err := f.SyscallConn()
		if err != nil {
			return fds, fmt.Errorf("initproto: stdio: %w", err)
		}
		var dfd int
		var derr error
		if err := rc.Control(func(fd uintptr) {
			r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 3)
			dfd = int(r)
			if e != 0 {
				derr = e
			}
		}); err != nil {
			return fds, fmt.Errorf("initproto: stdio: %w", err)
		}
		if derr != nil {
			return fds, fmt.Errorf("initproto: dup stdio: %w", derr)
		}
		fds = append(fds, dfd)
	}
	return fds, nil
}

func execPacket(req ExecRequest) (*Packet, error) {
	if len(req.Args) == 0 {
		return nil, errdefs.Invalid("initproto: exec without args")
	}
	p := NewPacket("EXEC")
	for _, a := range req.Args {
		p.Add("arg", a)
	}
	for _, e := range req.Env {
		p.Add("env", e)
	}
	if req.Cwd != "" {
		p.Add("cwd", req.Cwd)
	}
	p.Add("uid", strconv.Itoa(req.UID)).Add("gid", strconv.Itoa(req.GID))
	if len(req.Groups) > 0 {
		gs := make([]string, len(req.Groups))
		for i, g := range req.Groups {
			gs[i] = strconv.Itoa(g)
		}
		p.Add("groups", strings.Join(gs, ","))
	}
	if req.Tag != "" {
		p.Add("tag", req.Tag)
	}
	if req.TTY {
		p.Add("tty", "1")
	}
	if req.Master != nil && (req.Tag == "" || !req.TTY) {
		return nil, errdefs.Invalid("initproto: a terminal master to keep needs Tag and TTY")
	}
	if req.OutputCap < 0 {
		return nil, errdefs.Invalid("initproto: negative output cap")
	}
	if req.OutputCap > 0 && req.TTY {
		return nil, errdefs.Invalid("initproto: the init does not pump a terminal's output (OutputCap with TTY)")
	}
	if req.OutputCap > 0 {
		p.Add("outcap", strconv.FormatInt(req.OutputCap, 10))
	}
	return p, nil
}

// Exec starts a process with stdio as its fds 0-2 (nil entries get
// /dev/null) and returns its pid inside the sandbox. A process that could not
// be started yields *ExecError.
func (c *Conn) Exec(ctx context.Context, req ExecRequest, stdio [3]*os.File) (int, error) {
	p, err := execPacket(req)
	if err != nil {
		return 0, err
	}
	files := stdio[:]
	if req.Master != nil {
		files = append(files, req.Master)
	}
	fds, err := dupFiles(files)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.exchange(ctx, p, syscall.UnixRights(fds...))
	if err != nil {
		return 0, err
	}
	switch r.Op {
	case "STARTED":
		pid, err := r.Int("pid")
		if err != nil {
			return 0, err
		}
		c.proc = true
		return int(pid), nil
	case "ERROR":
		if _, ok := r.Get("step"); ok {
			errno, msg := errorReply(r)
			return 0, &ExecError{Errno: errno, Msg: msg}
		}
		return 0, remoteErr("EXEC", r)
	}
	return 0, unexpected("EXEC", r)
}

// Wait returns the exit of the connection's process (from Exec or a running
// Attach). Cancelling ctx returns ctx.Err() and leaves the process alone;
// Wait may be called again.
func (c *Conn) Wait(ctx context.Context) (Exit, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exit != nil {
		e := *c.exit
		c.exit, c.proc = nil, false
		return e, nil
	}
	if !c.proc {
		return Exit{}, errors.New("initproto: wait: no process on this connection")
	}
	r, err := c.read(ctx)
	if err != nil {
		return Exit{}, err
	}
	switch r.Op {
	case "EXITED":
		c.proc = false
		return parseExit(r)
	case "ERROR":
		return Exit{}, remoteErr("WAIT", r)
	}
	return Exit{}, unexpected("WAIT", r)
}

// Kill sends sig to the process group of the connection's process. The init
// sends no reply; signalling a process that already exited does nothing.
func (c *Conn) Kill(sig int) error {
	return c.send(context.Background(), NewPacket("KILL").Add("sig", strconv.Itoa(sig)), nil)
}

// Attach attaches the connection to the tagged process. If it still runs,
// running is true and Wait later returns its exit; otherwise exit is set
// (and Wait returns it as well).
func (c *Conn) Attach(ctx context.Context, tag string) (pid int, running bool, exit *Exit, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, false, nil, err
	}
	if err := c.send(ctx, NewPacket("WAIT").Add("tag", tag), nil); err != nil {
		return 0, false, nil, err
	}
	r, fds, err := c.readFDs(ctx)
	if err != nil {
		return 0, false, nil, err
	}
	if v, _ := r.Get("tty"); v == "1" && len(fds) == 1 {
		c.master = os.NewFile(uintptr(fds[0]), "pty-master:"+tag)
	} else {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	switch r.Op {
	case "RUNNING", "EXITED":
		p, err := r.Int("pid")
		if err != nil {
			return 0, false, nil, err
		}
		c.proc = true
		if r.Op == "RUNNING" {
			return int(p), true, nil, nil
		}
		e, err := parseExit(r)
		if err != nil {
			return 0, false, nil, err
		}
		c.exit = &e
		return int(p), false, &e, nil
	case "ERROR":
		return 0, false, nil, remoteErr("WAIT", r)
	}
	return 0, false, nil, unexpected("WAIT", r)
}

// TakeMaster returns the terminal master the last Attach received (nil if
// the process has no terminal); the caller owns it.
func (c *Conn) TakeMaster() *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.master
	c.master = nil
	return m
}

// Signal sends sig to the process group of the tagged process.
func (c *Conn) Signal(ctx context.Context, tag string, sig int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.exchange(ctx, NewPacket("SIGNAL").Add("tag", tag).Add("sig", strconv.Itoa(sig)), nil)
	if err != nil {
		return err
	}
	switch r.Op {
	case "OK":
		return nil
	case "ERROR":
		return remoteErr("SIGNAL", r)
	}
	return unexpected("SIGNAL", r)
}

// PS lists the tagged processes, running ones and kept exit records.
func (c *Conn) PS(ctx context.Context) ([]TaggedProc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.exchange(ctx, NewPacket("PS"), nil)
	var all []TaggedProc
	for err == nil {
		if r.Op == "ERROR" {
			return nil, remoteErr("PS", r)
		}
		var ps []TaggedProc
		if ps, err = parsePS(r); err != nil {
			return nil, err
		}
		all = append(all, ps...)
		if v, _ := r.Get("more"); v != "1" {
			return all, nil
		}
		r, err = c.read(ctx)
	}
	return nil, err
}

// Ping checks that the init answers.
func (c *Conn) Ping(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.exchange(ctx, NewPacket("PING"), nil)
	if err != nil {
		return err
	}
	if r.Op != "PONG" {
		return unexpected("PING", r)
	}
	return nil
}

func parseExit(r *Packet) (Exit, error) {
	if r.Op != "EXITED" {
		return Exit{}, unexpected("EXITED", r)
	}
	var v [4]int64
	for i, k := range []string{"status", "utime_us", "stime_us", "maxrss_kb"} {
		n, err := r.Int(k)
		if err != nil {
			return Exit{}, err
		}
		v[i] = n
	}
	return Exit{
		Status:   syscall.WaitStatus(uint32(v[0])),
		UTime:    time.Duration(v[1]) * time.Microsecond,
		STime:    time.Duration(v[2]) * time.Microsecond,
		MaxRSSKB: v[3],
	}, nil
}

// parsePS reads proc=TAG:PID:RUNNING entries; the tag may contain ':'.
func parsePS(r *Packet) ([]TaggedProc, error) {
	if r.Op != "PS" {
		return nil, unexpected("PS", r)
	}
	var ps []TaggedProc
	for _, v := range r.All("proc") {
		rest, run, ok1 := cutLast(v)
		tag, pidS, ok2 := cutLast(rest)
		pid, err := strconv.Atoi(pidS)
		if !ok1 || !ok2 || err != nil || (run != "0" && run != "1") {
			return nil, fmt.Errorf("initproto: bad PS entry %q", v)
		}
		ps = append(ps, TaggedProc{Tag: tag, PID: pid, Running: run == "1"})
	}
	return ps, nil
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// ExecPacket is the EXEC request for req without its fds: for agents that
// carry stdio as streams instead (the microVM guest agent, internal/backend/vm).
func ExecPacket(req ExecRequest) (*Packet, error) { return execPacket(req) }
