package container

import (
	"context"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/procio"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
)

// proc is a process started (or re-attached) through the sandbox init.
type proc struct {
	in         *instance
	c          *initproto.Conn
	pid        int
	oomsBefore uint64        // cgroup OOM kill count at start (oomTally.start); unknownOOMs if unknown
	pipes      *procio.Pipes // stdio pumped by this process; nil if none
	term       *procio.Term  // the terminal, for a TTY process

	mu    sync.Mutex
	final *initproto.Exit

	// sigMu orders Signal and Close: once closed, the connection may carry
	// another exec (idle.put), so a late signal must not go down it.
	sigMu  sync.Mutex
	closed bool
}

func (p *proc) PID() int { return p.pid }

// Wait implements driver.Proc.
func (p *proc) Wait(ctx context.Context) (driver.Exit, error) {
	p.mu.Lock()
	final := p.final
	p.mu.Unlock()
	if final == nil {
		ex, err := p.waitConn(ctx)
		if err != nil {
			return driver.Exit{}, err
		}
		p.mu.Lock()
		p.final = &ex
		final = p.final
		p.mu.Unlock()
	}
	// The output is the caller's once Wait returns: drain what the process
	// (and, for a short grace, what its descendants) still write.
	if p.pipes != nil {
		p.pipes.Drain(procio.DrainGrace)
	}
	if p.term != nil {
		p.term.Drain(procio.DrainGrace)
	}
	return p.convert(*final), nil
}

// waitConn waits for the exit report; if the init dies first, the process died
// with it (SIGKILL from the pid namespace teardown). The init's end cancels the
// wait (context.AfterFunc: no goroutine per exec waits for it).
func (p *proc) waitConn(ctx context.Context) (initproto.Exit, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.in.life, cancel)()
	ex, err := p.c.Wait(wctx)
	if err != nil && !p.in.alive() {
		return initproto.Exit{Status: syscall.WaitStatus(unix.SIGKILL)}, nil
	}
	return ex, err
}

func (p *proc) convert(ex initproto.Exit) driver.Exit {
	out := driver.Exit{CPUTime: ex.UTime + ex.STime, MaxRSS: ex.MaxRSSKB << 10}
	switch {
	case ex.Status.Exited():
		out.Code = ex.Status.ExitStatus()
	case ex.Status.Signaled():
		out.Code = -1
		out.Signal = int(ex.Status.Signal())
	}
	// The kernel killed something in this sandbox for memory while the command
	// ran: the command itself, or a child it waited for (a shell reports 137).
	// A concurrent command in the same sandbox can share the blame (oomTally).
	out.OOMKilled = p.in.ooms.killedSince(p.oomsBefore)
	return out
}

// Signal implements driver.Proc: the signal goes to the process group, or to
// the terminal's foreground process group.
// A signal after Close (the process ended and was released, e.g. a kill
// racing the process's own end) is nothing to do.
func (p *proc) Signal(sig int) error {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.closed {
		return nil
	}
	if p.term != nil {
		return p.term.Signal(sig, p.c.Kill)
	}
	return p.c.Kill(sig)
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
	p.sigMu.Lock()
	was := p.closed
	p.closed = true
	p.sigMu.Unlock()
	if was {
		return nil
	}
	if p.pipes != nil {
		p.pipes.Close()
	}
	if p.term != nil {
		p.term.Close()
		return p.c.Close()
	}
	// a connection whose process exited carries the sandbox's next exec
	p.in.idle.put(p.c)
	return nil
}

// failedProc is a process whose exec failed: it "exited" at once.
type failedProc struct{ exit driver.Exit }

func (f *failedProc) PID() int                                  { return 0 }
func (f *failedProc) Wait(context.Context) (driver.Exit, error) { return f.exit, nil }
func (f *failedProc) Signal(int) error                          { return nil }
func (f *failedProc) Resize(int, int) error                     { return procio.NoTTY() }
func (f *failedProc) Close() error                              { return nil }
