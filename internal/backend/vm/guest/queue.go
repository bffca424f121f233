package guest

import (
	"context"
	"sync"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
)

// queue holds reply packets until read; the read loop never blocks on it.
type queue struct {
	mu  sync.Mutex
	q   []*initproto.Packet
	err error
	sig chan struct{} // closed and replaced on every change
}

func newQueue() *queue { return &queue{sig: make(chan struct{})} }

func (q *queue) push(p *initproto.Packet) {
	q.mu.Lock()
	q.q = append(q.q, p)
	close(q.sig)
	q.sig = make(chan struct{})
	q.mu.Unlock()
}

func (q *queue) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
		close(q.sig)
		q.sig = make(chan struct{})
	}
	q.mu.Unlock()
}

func (q *queue) pop(ctx context.Context) (*initproto.Packet, error) {
	for {
		q.mu.Lock()
		if len(q.q) > 0 {
			p := q.q[0]
			q.q = q.q[1:]
			q.mu.Unlock()
			return p, nil
		}
		if q.err != nil {
			err := q.err
			q.mu.Unlock()
			return nil, err
		}
		sig := q.sig
		q.mu.Unlock()
		select {
		case <-sig:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pipe is an unbounded in-memory stream: the read loop appends, a reader
// drains. close(err) ends it after the buffered bytes.
type pipe struct {
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	err  error
}

func newPipe() *pipe {
	p := &pipe{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *pipe) write(b []byte) {
	p.mu.Lock()
	if p.err == nil {
		p.buf = append(p.buf, b...)
		p.cond.Broadcast()
	}
	p.mu.Unlock()
}

func (p *pipe) close(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
		p.cond.Broadcast()
	}
	p.mu.Unlock()
}

func (p *pipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && p.err == nil {
		p.cond.Wait()
	}
	if len(p.buf) == 0 {
		return 0, p.err
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	if len(p.buf) == 0 {
		p.buf = nil
	}
	return n, nil
}
