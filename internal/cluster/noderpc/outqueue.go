package noderpc

import (
	"sync"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpcpb"
)

// outBudget bounds the output one streaming exec holds in memory on the node
// while the network catches up.
const outBudget = 1 << 20

// outQueue decouples a streaming exec's output from the network: the drivers
// stop copying a finished process's output after a short grace
// (procio.DrainGrace), so a writer that waits on a slow connection would lose
// the output's tail. Writes are copied into the queue (up to outBudget bytes;
// beyond it they wait) and one goroutine sends them in order.
type outQueue struct {
	send func(*noderpcpb.ExecOutput) error

	mu     sync.Mutex
	cond   sync.Cond
	frames []*noderpcpb.ExecOutput
	bytes  int
	closed bool
	err    error // the first send error; every later write fails with it
	done   chan struct{}
}

func newOutQueue(send func(*noderpcpb.ExecOutput) error) *outQueue {
	q := &outQueue{send: send, done: make(chan struct{})}
	q.cond.L = &q.mu
	go q.run()
	return q
}

func (q *outQueue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		for len(q.frames) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.frames) == 0 {
			q.mu.Unlock()
			return
		}
		f := q.frames[0]
		q.frames[0] = nil
		q.frames = q.frames[1:]
		q.mu.Unlock()
		err := q.send(f)
		q.mu.Lock()
		q.bytes -= frameBytes(f)
		if err != nil && q.err == nil {
			q.err = err
			q.frames = nil
		}
		q.cond.Broadcast()
		q.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func frameBytes(f *noderpcpb.ExecOutput) int { return len(f.GetStdout()) + len(f.GetStderr()) }

// put queues a frame, waiting while the queue is over its budget.
func (q *outQueue) put(f *noderpcpb.ExecOutput) error {
	n := frameBytes(f)
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.err == nil && q.bytes > 0 && q.bytes+n > outBudget {
		q.cond.Wait()
	}
	if q.err != nil {
		return q.err
	}
	q.frames = append(q.frames, f)
	q.bytes += n
	q.cond.Broadcast()
	return nil
}

// writer is an io.Writer that queues copies of what it is given as frames
// made by mk, at most chunkSize each.
func (q *outQueue) writer(mk func([]byte) *noderpcpb.ExecOutput) frameWriter {
	return func(b []byte) error { return q.put(mk(append([]byte(nil), b...))) }
}

// close sends what is queued and returns the first send error.
func (q *outQueue) close() error {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
	<-q.done
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}
