package container

import (
	"context"
	"errors"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
)

// maxIdleConns is how many control connections a sandbox keeps for later
// execs: enough for a few concurrent commands, a descriptor each.
const maxIdleConns = 4

// idleConns are control connections to a sandbox's init whose process
// exited. An exec takes one instead of dialing: a connection per exec costs
// a socket, a connect, an accept in the init and a close on both sides.
type idleConns struct {
	mu       sync.Mutex
	conns    []*initproto.Conn
	closed   bool // the init is gone or the sandbox destroyed: keep none
	disabled bool // the init refuses a second EXEC on a connection
}

// take returns an idle connection, or nil.
func (p *idleConns) take() *initproto.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	if n == 0 {
		return nil
	}
	c := p.conns[n-1]
	p.conns = p.conns[:n-1]
	return c
}

// put keeps c for a later exec if it can carry one, else closes it.
func (p *idleConns) put(c *initproto.Conn) {
	if c.Reusable() {
		p.mu.Lock()
		keep := !p.closed && !p.disabled && len(p.conns) < maxIdleConns
		if keep {
			p.conns = append(p.conns, c)
		}
		p.mu.Unlock()
		if keep {
			return
		}
	}
	c.Close()
}

// disable closes the idle connections and keeps none from now on.
func (p *idleConns) disable() {
	p.mu.Lock()
	p.disabled = true
	p.mu.Unlock()
	p.drop()
}

// closeAll closes the idle connections for good.
func (p *idleConns) closeAll() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.drop()
}

func (p *idleConns) drop() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// conn returns a control connection for an exec: an idle one (pooled) or a
// new one.
func (in *instance) conn(ctx context.Context) (c *initproto.Conn, pooled bool, err error) {
	if c := in.idle.take(); c != nil {
		if in.alive() {
			return c, true, nil
		}
		c.Close()
	}
	c, err = in.dial(ctx)
	return c, false, err
}

// olderInit reports whether err is an init's refusal of a second EXEC on one
// connection (inits from before connection reuse, still running after the
// node was upgraded).
func olderInit(err error) bool {
	var re *initproto.RemoteError
	return errors.As(err, &re) && re.Op == "EXEC" && re.Errno == unix.EBUSY
}
