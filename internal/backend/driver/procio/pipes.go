// Package procio is the stdio plumbing the drivers share. Pipes turns a
// driver.Stdio into the three files a process is handed (an *os.File the caller
// gave as it is, /dev/null for nil, a pipe pumped by a goroutine otherwise); Term
// does the same for a process with a terminal: the caller's streams are pumped to
// and from the terminal's master end, which also carries resizes and signals to
// the foreground process group.
package procio

import (
	"io"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
)

// DrainGrace is how long output is still collected after a process exited, for
// descendants that keep its stdout open (a daemon started by the command).
const DrainGrace = 100 * time.Millisecond

// Pipes are the host side of one process's stdio.
type Pipes struct {
	// Child are the files to hand to the process as fds 0-2; CloseChild closes
	// them once the process has its own copies.
	Child [3]*os.File

	in     io.Reader
	stdinW *os.File
	outR   [2]*os.File
	out    [2]io.Writer
	owned  []*os.File // files Open created (the caller's own files are not ours)
	mu     sync.Mutex // serializes writes to the caller's writers
	act    activity
	closed sync.Once

	// pumping counts the output pumps still copying; the last one to end
	// closes drained (nil: Start had no pump to run).
	pumping atomic.Int32
	drained chan struct{}

	// Held in the one allocation of Pipes rather than one each per exec:
	// the backing array of owned (at most two files per stream) and each
	// pump's first, small buffer.
	ownedBuf [6]*os.File
	small    [2][smallBuf]byte
}

// smallBuf is an output pump's first buffer: most commands write little or
// nothing.
const smallBuf = 512

// Open prepares s. Blocking mode matters: the process shares the open file
// description of each end it gets, and Go opens pipes non-blocking, so the
// child's ends are switched to blocking (a child reading an empty stdin pipe
// would get EAGAIN otherwise).
func Open(s driver.Stdio) (*Pipes, error) {
	p := &Pipes{in: s.Stdin}
	p.owned = p.ownedBuf[:0]
	fail := func(err error, what string) (*Pipes, error) {
		p.Close()
		return nil, errdefs.Internal(err, "%s", what)
	}
	switch in := s.Stdin.(type) {
	case nil:
		f, err := os.Open(os.DevNull)
		if err != nil {
			return fail(err, "open /dev/null")
		}
		p.own(f)
		p.Child[0] = f
	case *os.File:
		p.Child[0] = in
		p.in = nil
	default:
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err, "pipe")
		}
		p.own(r, w)
		p.Child[0], p.stdinW = r, w
	}
	outs := [2]io.Writer{s.Stdout, s.Stderr}
	for i, w := range outs {
		switch w := w.(type) {
		case nil:
			f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return fail(err, "open /dev/null")
			}
			p.own(f)
			p.Child[i+1] = f
		case *os.File:
			p.Child[i+1] = w
		default:
			if i == 1 && p.outR[0] != nil && sameWriter(outs[0], outs[1]) {
				// One writer for both: one pipe, so the order is kept.
				p.Child[2] = p.Child[1]
				continue
			}
			r, wf, err := os.Pipe()
			if err != nil {
				return fail(err, "pipe")
			}
			p.own(r, wf)
			p.outR[i], p.Child[i+1], p.out[i] = r, wf, w
		}
	}
	for _, f := range p.Child {
		f.Fd() // switches the file to blocking mode
	}
	return p, nil
}

// sameWriter reports whether a and b are one writer; writers of uncomparable
// types (a func type, a struct with a slice) are never the same.
func sameWriter(a, b io.Writer) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

func (p *Pipes) own(fs ...*os.File) { p.owned = append(p.owned, fs...) }

// CloseChild closes the files Open made for the child (after it started, or
// after a failed start). The caller's own files stay open.
func (p *Pipes) CloseChild() {
	for i, f := range p.Child {
		if f != nil && p.isOwned(f) {
			f.Close()
		}
		p.Child[i] = nil
	}
}

func (p *Pipes) isOwned(f *os.File) bool {
	for _, o := range p.owned {
		if o == f {
			return true
		}
	}
	return false
}

// Start pumps stdin and output in the background.
func (p *Pipes) Start() {
	if p.stdinW != nil {
		go p.pumpInput()
	}
	n := 0
	for _, r := range p.outR {
		if r != nil {
			n++
		}
	}
	if n == 0 {
		return
	}
	p.pumping.Store(int32(n))
	p.drained = make(chan struct{})
	for i, r := range p.outR {
		if r != nil {
			go p.pump(i)
		}
	}
}

func (p *Pipes) pumpInput() {
	_, _ = io.Copy(p.stdinW, p.in)
	p.stdinW.Close()
}

// pump copies output pipe i to the caller's writer (serialized with the
// other's), recording its progress for Drain. A failing writer ends the copy.
func (p *Pipes) pump(i int) {
	defer func() {
		if p.pumping.Add(-1) == 0 {
			close(p.drained)
		}
	}()
	r := p.outR[i]
	// Most commands write little or nothing: the small buffer first, the
	// big one once a read fills it.
	buf := p.small[i][:]
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.act.beginWrite()
			werr := p.write(i, buf[:n])
			p.act.endWrite()
			if werr != nil {
				return
			}
			if n == len(buf) && n < pumpBuf {
				buf = make([]byte, pumpBuf)
			}
		}
		if err != nil {
			drainRest(r, err, buf, func(b []byte) error { return p.write(i, b) })
			return
		}
	}
}

// write hands b to output i's writer, serialized with the other output's.
func (p *Pipes) write(i int, b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.out[i].Write(b)
	return err
}

// pumpBuf is the copy buffer of an output pipe that has more than a little
// to say.
const pumpBuf = 32 << 10

// Drain waits until the output was copied (every writer of the pipes closed
// them). Once no output has come for grace (counted from the call, and never
// while the caller's writer is still taking earlier output) or after DrainMax,
// it stops copying: a descendant that keeps the pipe open cannot hold it.
func (p *Pipes) Drain(grace time.Duration) { p.drain(grace, DrainMax) }

func (p *Pipes) drain(grace, limit time.Duration) {
	if p.drained == nil {
		return // no pump ran
	}
	p.act.wait(p.drained, grace, limit, func() {
		for _, r := range p.outR {
			if r != nil {
				stopReading(r)
			}
		}
	})
}

// Close releases every file Open made.
func (p *Pipes) Close() {
	p.closed.Do(func() {
		for _, f := range p.owned {
			f.Close()
		}
	})
}
