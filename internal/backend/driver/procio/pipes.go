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
	wg     sync.WaitGroup
	act    activity
	closed sync.Once
}

// Open prepares s. Blocking mode matters: the process shares the open file
// description of each end it gets, and Go opens pipes non-blocking, so the
// child's ends are switched to blocking (a child reading an empty stdin pipe
// would get EAGAIN otherwise).
func Open(s driver.Stdio) (*Pipes, error) {
	p := &Pipes{in: s.Stdin}
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
		go func() {
			_, _ = io.Copy(p.stdinW, p.in)
			p.stdinW.Close()
		}()
	}
	for i := range 2 {
		if p.outR[i] == nil {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pump(p.outR[i], p.out[i])
		}()
	}
}

// pump copies one output pipe to the caller's writer (serialized with the
// other's), recording its progress for Drain. A failing writer ends the copy.
func (p *Pipes) pump(r *os.File, w io.Writer) {
	// Most commands write little or nothing: a small buffer first, the big
	// one once a read fills it.
	buf := make([]byte, 512)
	write := func(b []byte) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		_, err := w.Write(b)
		return err
	}
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.act.beginWrite()
			werr := write(buf[:n])
			p.act.endWrite()
			if werr != nil {
				return
			}
			if n == len(buf) && n < pumpBuf {
				buf = make([]byte, pumpBuf)
			}
		}
		if err != nil {
			drainRest(r, err, buf, write)
			return
		}
	}
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
	drained := make(chan struct{})
	go func() { p.wg.Wait(); close(drained) }()
	p.act.wait(drained, grace, limit, func() {
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
