package v1

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Stream tuning.
const (
	// stdinQueue is how many decoded stdin chunks may wait for the process; beyond
	// it the reader stops reading the request body (TCP backpressure).
	stdinQueue = 16
	// inputGrace is how long the handler waits, after the exit event, for the
	// client to end its request body before it cuts the read.
	inputGrace = 500 * time.Millisecond
)

// execStream handles POST /v1/sandboxes/{id}/exec/stream, a full-duplex NDJSON
// exchange: the request body is an ExecRequest line followed by StreamInput lines,
// the response is StreamEvent lines flushed as they happen. Errors before the first
// event are ordinary JSON error responses; later ones are an "error" event. An
// input line that is well-formed but refused (an unknown signal, a resize of an
// exec without a terminal, a zero or huge size) gets an "input_error" event and
// changes nothing else: the exec and its input go on.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request) {
	var req api.ExecRequest
	rc, lines, ok := s.openStream(w, r, &req)
	if !ok {
		return
	}
	// The one check of this request, here rather than in the chain
	// (session.ExecValidated): a bad one is refused before any event, and its
	// stdin moves into the stream below.
	if err := req.Validate(); err != nil {
		s.writeError(w, r, err)
		return
	}
	ev := &eventWriter{ndjsonStream{w: w, rc: rc}}
	s.streamExec(w, r, rc, lines, ev, r.PathValue("id"), req, nil)
}

// openStream prepares a full-duplex NDJSON exchange (the response may be
// written while the request body is still read) and decodes its first line
// into first, or answers the error.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request, first any) (*http.ResponseController, *lineReader, bool) {
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.writeError(w, r, errdefs.Internal(err, "enabling full duplex"))
		return nil, nil, false
	}
	// A stream's connection is never reused: the request body may still be open
	// (or cut by a read deadline) when the handler returns, and a keep-alive
	// request after it would race with that read.
	w.Header().Set("Connection", "close")
	lines := newLineReader(r.Body, s.opts.MaxBodyBytes)
	line, err := lines.next()
	if err == nil {
		err = decodeLine(line, first)
	} else if errors.Is(err, io.EOF) {
		err = errEmptyBody
	}
	if err != nil {
		s.writeError(w, r, err)
		return nil, nil, false
	}
	return rc, lines, true
}

// streamExec runs the validated req in sandbox id with the rest of the
// request body as its input and ev as its output, and ends the stream with
// the "exit" or "error" event. finish, if set, runs once the exec is over
// (however it ended) and before that event; its error goes into the exit
// event's error.
func (s *Server) streamExec(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, lines *lineReader,
	ev *eventWriter, id string, req api.ExecRequest, finish func() error) {
	ctx, cancel := context.WithCancel(session.ExecValidated(r.Context()))
	defer cancel()
	// A command that prints nothing for minutes must not leave the stream
	// silent (NATs and proxies drop idle connections): a "keepalive" event
	// goes out when nothing else did for the keep-alive interval.
	kaDone := make(chan struct{})
	kaStop := make(chan struct{})
	go func() {
		defer close(kaDone)
		ev.keepAlive(kaStop, s.keepAliveEvery(), api.StreamEvent{Type: "keepalive"}, false)
	}()
	defer func() { close(kaStop); <-kaDone }()
	stdin := newChunkReader(ctx)
	if !s.steps && !s.stepsDownstream(ctx) {
		// The trajectory decorator sends the request's own stdin first itself (it is
		// part of a step's fingerprint); without one the server does. A tagged
		// step that a cluster's node logs keeps it in the request for that node's
		// decorator.
		if initial, err := initialStdin(req); err == nil && len(initial) > 0 {
			stdin.push(initial)
		}
		req.Stdin, req.StdinBase64 = "", ""
	}
	control := make(chan session.Control, 8)

	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		refused := func(err error) { ev.send(api.StreamEvent{Type: "input_error", Error: apiError(err)}) }
		if err := readInput(ctx, lines, stdin, control, req.TTY, refused); err != nil {
			ev.send(api.StreamEvent{Type: "error", Error: apiError(err)})
		}
	}()

	res, err := s.svc.ExecStream(ctx, id, req, session.Stream{
		Stdin:   stdin,
		Stdout:  ev.output("stdout"),
		Stderr:  ev.output("stderr"),
		Started: func(pid int) { ev.send(api.StreamEvent{Type: "started", PID: pid}) },
		Control: control,
	})
	cancel()
	var ferr error
	if finish != nil {
		ferr = finish()
	}
	switch {
	case err != nil && !ev.hasStarted():
		s.stopInput(rc, inputDone, 0) // nothing more to read: answer at once
		s.writeError(w, r, err)
		return
	case err != nil:
		ev.send(api.StreamEvent{Type: "error", Error: apiError(err)})
	default:
		res.Stdout, res.Stderr = "", ""
		out := api.StreamEvent{Type: "exit", Result: &res}
		if ferr != nil {
			out.Error = apiError(ferr)
		}
		ev.send(out)
	}
	grace := inputGrace
	if replayed(w) {
		grace = 0 // answered from the log: the client's input is not needed
	}
	s.stopInput(rc, inputDone, grace)
}

// stopInput waits briefly for the client to end its request body, then cuts the
// read so the input goroutine never outlives the handler.
func (s *Server) stopInput(rc *http.ResponseController, done <-chan struct{}, grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	if err := rc.SetReadDeadline(time.Now()); err != nil {
		s.log.Debug("cutting exec/stream input", "err", err)
	}
	<-done
}

// initialStdin returns the ExecRequest's own stdin, sent before any stream input.
func initialStdin(req api.ExecRequest) ([]byte, error) {
	if req.StdinBase64 != "" {
		return base64.StdEncoding.DecodeString(req.StdinBase64)
	}
	return []byte(req.Stdin), nil
}

// readInput feeds stdin, signals and resizes from the request body's StreamInput
// lines until eof, the end of the body or ctx. A line the exec cannot take (a bad
// signal or size) goes to refused and the rest of the line is still applied; a
// line that cannot be read or decoded ends the input with an error. Stdin is
// always closed when it returns.
func readInput(ctx context.Context, lines *lineReader, stdin *chunkReader, control chan<- session.Control,
	tty bool, refused func(error)) error {
	defer stdin.closeWrite()
	for {
		line, err := lines.next()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		var in api.StreamInput
		if err := decodeLine(line, &in); err != nil {
			return err
		}
		for _, c := range controls(in, tty, refused) {
			select {
			case control <- c:
			case <-ctx.Done():
				return nil
			}
		}
		if len(in.Stdin) > 0 && !stdin.push(in.Stdin) {
			return nil
		}
		if in.EOF {
			stdin.closeWrite()
		}
	}
}

// controls returns the control messages of one input line, handing each refused
// one to refused.
func controls(in api.StreamInput, tty bool, refused func(error)) []session.Control {
	var out []session.Control
	if in.Signal != "" {
		if sig, err := parseSignal(in.Signal, 0); err != nil {
			refused(err)
		} else {
			out = append(out, session.Control{Signal: sig})
		}
	}
	if in.Resize != nil {
		c := session.Control{Resize: in.Resize}
		if err := session.CheckControl(c, tty); err != nil {
			refused(err)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// lineReader splits a body into non-empty lines of at most limit bytes.
type lineReader struct {
	br    *bufio.Reader
	limit int64
}

func newLineReader(r io.Reader, limit int64) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), limit: limit}
}

// next returns the next non-blank line without its newline; io.EOF at the end.
func (l *lineReader) next() ([]byte, error) {
	for {
		var line []byte
		for {
			frag, err := l.br.ReadSlice('\n')
			if int64(len(line)+len(frag)) > l.limit+1 {
				return nil, tooLarge(l.limit)
			}
			line = append(line, frag...)
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0 {
				return line, nil // last line without a newline
			}
			var mbe *http.MaxBytesError
			if errors.Is(err, io.EOF) || errors.As(err, &mbe) {
				return nil, err
			}
			if isTimeout(err) {
				return nil, io.EOF // the handler cut the input
			}
			return nil, errdefs.Invalid("reading request body: %v", err)
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			return t, nil
		}
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &te) && te.Timeout()
}

// chunkReader is the process's stdin: chunks pushed by the input reader, read in
// order, EOF once closed for writing.
type chunkReader struct {
	ctx    context.Context
	ch     chan []byte
	cur    []byte
	once   sync.Once
	closed chan struct{}
}

func newChunkReader(ctx context.Context) *chunkReader {
	return &chunkReader{ctx: ctx, ch: make(chan []byte, stdinQueue), closed: make(chan struct{})}
}

// push queues p (blocking while the queue is full); false once ctx ended or
// stdin was closed.
func (c *chunkReader) push(p []byte) bool {
	select {
	case <-c.closed:
		return false
	default:
	}
	select {
	case c.ch <- p:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// closeWrite marks the end of stdin. Only the input goroutine pushes after the
// request line, so closing the channel here cannot race a send.
func (c *chunkReader) closeWrite() {
	c.once.Do(func() {
		close(c.closed)
		close(c.ch)
	})
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		select {
		case b, ok := <-c.ch:
			if !ok {
				return 0, io.EOF
			}
			c.cur = b
		case <-c.ctx.Done():
			return 0, c.ctx.Err()
		}
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// eventWriter writes an exec stream's NDJSON events.
type eventWriter struct{ ndjsonStream }

// output returns an io.Writer sending each write as an event of type typ.
func (e *eventWriter) output(typ string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if len(p) == 0 {
			return 0, nil
		}
		if err := e.send(api.StreamEvent{Type: typ, Data: p}); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
