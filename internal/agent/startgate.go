package agent

import (
	"bytes"
	"io"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// maxHeld bounds the output a startGate keeps before the start is delivered;
// past it the driver's copy waits (the process then blocks on its full pipe).
const maxHeld = 1 << 20

// startGate puts a streaming exec's "started" before its output, as the
// stream contract has it (session.Stream, docs/api-v1.md): a driver starts
// copying the process's output before its Exec returns with the PID, so a
// command that prints at once (or a terminal echoing input) would otherwise
// reach the client first. What is written before start is held (microseconds'
// worth: the time Exec takes to return) and goes out right behind the
// started event; after that, writes pass straight through. The start is not
// delayed at all.
type startGate struct {
	open   atomic.Bool // started delivered and held output flushed
	mu     sync.Mutex  // serializes start with the writes before it
	out    [2]io.Writer
	held   []heldWrite
	size   int
	err    error         // a flush failed, or the exec never started
	opened chan struct{} // closed by start or abandon
}

type heldWrite struct {
	stream int // 0 stdout, 1 stderr
	b      []byte
}

// gate returns a gate over out and the writers to give the driver in its
// place. One writer for both streams stays one (the driver keeps one pipe for
// it, and so the order between them).
func gate(out [2]io.Writer) (*startGate, [2]io.Writer) {
	g := &startGate{out: out, opened: make(chan struct{})}
	w := [2]io.Writer{&gatedWriter{g, 0}, &gatedWriter{g, 1}}
	if t := reflect.TypeOf(out[0]); t == reflect.TypeOf(out[1]) && t != nil && t.Comparable() && out[0] == out[1] {
		w[1] = w[0]
	}
	return g, w
}

// start delivers the start through started, then the output held so far.
func (g *startGate) start(pid int, started func(int)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	started(pid)
	for _, h := range g.held {
		if _, err := g.out[h.stream].Write(h.b); err != nil {
			g.err = err
			break
		}
	}
	g.held, g.size = nil, 0
	if g.err == nil {
		g.open.Store(true)
	}
	close(g.opened)
}

// abandon drops the held output of an exec that did not start.
func (g *startGate) abandon() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = errdefs.Internal(nil, "the exec did not start")
	g.held, g.size = nil, 0
	close(g.opened)
}

func (g *startGate) write(stream int, p []byte) (int, error) {
	if g.open.Load() {
		return g.out[stream].Write(p)
	}
	g.mu.Lock()
	for g.size >= maxHeld && !g.open.Load() && g.err == nil {
		g.mu.Unlock()
		<-g.opened
		g.mu.Lock()
	}
	defer g.mu.Unlock()
	switch {
	case g.err != nil:
		return 0, g.err
	case g.open.Load():
		return g.out[stream].Write(p)
	}
	g.held = append(g.held, heldWrite{stream, bytes.Clone(p)})
	g.size += len(p)
	return len(p), nil
}

type gatedWriter struct {
	g      *startGate
	stream int
}

func (w *gatedWriter) Write(p []byte) (int, error) { return w.g.write(w.stream, p) }
