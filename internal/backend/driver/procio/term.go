package procio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// CheckSize validates a terminal size (session.CheckTermSize: each side
// 1..session.MaxTermSide); a bad one is invalid_argument.
func CheckSize(cols, rows int) error {
	return session.CheckTermSize(api.TermSize{Cols: cols, Rows: rows})
}

// SetSize sets the terminal size on a pty master (or slave); the foreground
// process group gets SIGWINCH when it changes.
func SetSize(f *os.File, cols, rows int) error {
	if err := CheckSize(cols, rows); err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return errdefs.Internal(err, "resize terminal")
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	}); err != nil {
		ierr = err
	}
	if ierr != nil {
		return errdefs.Internal(ierr, "resize terminal")
	}
	return nil
}

// Foreground returns the terminal's foreground process group, as a pid in the
// caller's pid namespace.
func Foreground(master *os.File) (int, error) {
	rc, err := master.SyscallConn()
	if err != nil {
		return 0, err
	}
	var pgrp int
	var ierr error
	if err := rc.Control(func(fd uintptr) { pgrp, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP) }); err != nil {
		return 0, err
	}
	if ierr == nil && pgrp <= 0 {
		ierr = errors.New("no foreground process group")
	}
	return pgrp, ierr
}

// OpenPeer unlocks a pty master and opens its slave through the master
// (TIOCGPTPEER), so no path is looked up: the slave belongs to the master's
// devpts instance whichever mount namespace the caller is in.
func OpenPeer(master *os.File) (*os.File, error) {
	rc, err := master.SyscallConn()
	if err != nil {
		return nil, err
	}
	var sfd int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr != nil {
			return
		}
		r, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
		if e != 0 {
			ierr = e
		}
		sfd = int(r)
	}); err != nil {
		return nil, err
	}
	if ierr != nil {
		return nil, fmt.Errorf("open pty slave: %w", ierr)
	}
	return os.NewFile(uintptr(sfd), "pty-slave"), nil
}

// Term pumps a process's terminal: the caller's input to the master, the
// master's output (stdout and stderr in one) to the caller's writer.
type Term struct {
	master *os.File
	done   chan struct{}
	act    activity
	closed sync.Once
}

// NewTerm takes ownership of master, which should be pollable (opened or
// created non-blocking), so reads wait in the netpoller and Drain can stop one.
func NewTerm(master *os.File) *Term {
	return &Term{master: master, done: make(chan struct{})}
}

// Master is the master end.
func (t *Term) Master() *os.File { return t.master }

// Start pumps in (nil: none) to the terminal and its output to out (nil:
// discarded) until the last slave end is closed.
func (t *Term) Start(in io.Reader, out io.Writer) {
	if out == nil {
		out = io.Discard
	}
	if in != nil {
		go t.pumpInput(in)
	}
	go func() {
		defer close(t.done)
		buf := make([]byte, 32<<10)
		write := func(b []byte) error {
			_, err := out.Write(b)
			return err
		}
		for {
			n, err := t.master.Read(buf)
			if n > 0 {
				t.act.beginWrite()
				werr := write(buf[:n])
				t.act.endWrite()
				if werr != nil {
					out = io.Discard // keep reading: the program must not block on a full terminal
				}
			}
			if err != nil {
				// EIO: every slave end is closed; a deadline: Drain
				// stopped the pump; or Close
				drainRest(t.master, err, buf, write)
				return
			}
		}
	}()
}

// pumpInput copies in to the terminal. When in ends, the program sees end of
// file the way a typist makes it: the terminal's EOF character (^D), when the
// terminal is in canonical mode (a raw-mode program gets no EOF, as with a
// real terminal); a second one if a partial line was pending.
func (t *Term) pumpInput(in io.Reader) {
	var last byte = '\n'
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := t.master.Write(buf[:n]); werr != nil {
				return
			}
			last = buf[n-1]
		}
		if err != nil {
			break
		}
	}
	slave, err := OpenPeer(t.master)
	if err != nil {
		return
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	slave.Close()
	if err != nil || tio.Lflag&unix.ICANON == 0 {
		return
	}
	eof := []byte{tio.Cc[unix.VEOF]}
	if last != '\n' && last != eof[0] {
		_, _ = t.master.Write(eof) // ends the partial line
	}
	_, _ = t.master.Write(eof)
}

// Drain waits until the output was copied (the process and everything that
// holds the terminal ended). Like Pipes.Drain it gives up once no output has
// come for grace while the caller's writer was not busy, or after DrainMax.
func (t *Term) Drain(grace time.Duration) {
	t.act.wait(t.done, grace, DrainMax, func() { stopReading(t.master) })
}

// Resize sets the window size.
func (t *Term) Resize(cols, rows int) error { return SetSize(t.master, cols, rows) }

// Signal sends sig to the terminal's foreground process group (the job a
// shell runs); group signals the process's own group, and is used when there is
// no foreground group. SIGKILL goes to both: a kill ends the process, not only
// the job it runs.
func (t *Term) Signal(sig int, group func(int) error) error {
	pg, err := Foreground(t.master)
	if err != nil {
		return group(sig)
	}
	if err := unix.Kill(-pg, unix.Signal(sig)); err != nil {
		if err == unix.ESRCH {
			return group(sig)
		}
		return errdefs.Internal(err, "signal the terminal's foreground job")
	}
	if sig == int(unix.SIGKILL) {
		return group(sig)
	}
	return nil
}

// Close closes the master end.
func (t *Term) Close() error {
	var err error
	t.closed.Do(func() { err = t.master.Close() })
	return err
}

// NoTTY is the error of Resize on a process without a terminal.
func NoTTY() error { return errdefs.Invalid("the process has no terminal (start it with tty)") }

// NewPTY finishes a terminal from a freshly opened ptmx fd (non-blocking, so the
// master is pollable): it sets the size and opens the slave through the master.
// It takes ownership of masterFD.
func NewPTY(masterFD, cols, rows int) (master, slave *os.File, err error) {
	master = os.NewFile(uintptr(masterFD), "pty-master")
	if err := SetSize(master, cols, rows); err != nil {
		master.Close()
		return nil, nil, err
	}
	if slave, err = OpenPeer(master); err != nil {
		master.Close()
		return nil, nil, errdefs.Internal(err, "open the terminal")
	}
	return master, slave, nil
}
