package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Exec runs a command to completion. A non-zero exit is in the result, not an
// error. Exec is never retried: the command may have run.
func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	var res api.ExecResult
	err := c.do(ctx, call{method: http.MethodPost, path: sandboxPath(id, "/exec"), json: req}, &res)
	return res, err
}

// StreamOptions are the live I/O of a streaming exec.
type StreamOptions struct {
	// Stdin is streamed to the process. nil closes the process's stdin at once,
	// except with a terminal (req.TTY): then stdin stays open and Stream.Write
	// types into it (like `docker exec -t` without -i, nothing arrives unless
	// written).
	Stdin io.Reader
	// Stdout and Stderr receive the output as it comes; nil discards it. With a
	// terminal all output is the terminal's and goes to Stdout.
	Stdout, Stderr io.Writer
	// Signals delivers signals ("SIGTERM", "TERM" or "15") to the process group
	// (with a terminal: its foreground process group) while it runs.
	Signals <-chan string
	// OnStart, if set, is called with the process's PID once it started.
	OnStart func(pid int)
	// OnSandbox, if set, is called with the sandbox a run created (StartRun)
	// before any output is delivered.
	OnSandbox func(api.Sandbox)
	// OnInputError, if set, is called for each input line the server refused
	// (an "input_error" event: an unknown signal, a terminal size out of range)
	// with an invalid_argument error; the exec goes on either way.
	OnInputError func(*api.Error)
}

// ExecStream runs a command with live I/O over one full-duplex request: stdin is
// sent while output arrives. stdin nil closes the process's stdin at once. The
// result carries no output (it went to stdout and stderr).
func (c *Client) ExecStream(ctx context.Context, id string, req api.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (api.ExecResult, error) {
	return c.ExecStreamWithOptions(ctx, id, req, StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// ExecStreamWithOptions is ExecStream with signals, a terminal (req.TTY) and a
// start callback. Cancelling ctx ends the request, which kills the process.
func (c *Client) ExecStreamWithOptions(ctx context.Context, id string, req api.ExecRequest, o StreamOptions) (api.ExecResult, error) {
	s, err := c.StartExecStream(ctx, id, req, o)
	if err != nil {
		return api.ExecResult{}, err
	}
	return s.Wait()
}

// Stream is a running streaming exec: a handle to type into it, resize its
// terminal and signal it while its output flows to StreamOptions' writers. Its
// methods are safe for concurrent use.
type Stream struct {
	tty    bool
	ctx    context.Context
	cancel context.CancelFunc
	in     *inputWriter
	pw     *io.PipeWriter
	resp   *http.Response
	dec    *json.Decoder // of resp's events
	done   chan struct{} // closed when the final event was read
	res    api.ExecResult
	err    error

	sandbox   api.Sandbox // a run's
	removeErr *api.Error  // a run's failed delete, from its exit event
}

// StartExecStream starts a streaming exec and returns once the server accepted
// it (an error before that, e.g. not_found or invalid_argument, is returned
// here). Output is delivered to o's writers from then on; call Wait for the
// result. Cancelling ctx, or Close, ends the request, which kills the process.
func (c *Client) StartExecStream(ctx context.Context, id string, req api.ExecRequest, o StreamOptions) (*Stream, error) {
	first, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("dsec client: encoding the exec request: %w", err)
	}
	return c.startStream(ctx, sandboxPath(id, "/exec/stream"), first, req.TTY, o, false)
}

// StartRun creates a sandbox, runs a command in it with live I/O and, with
// req.Remove, deletes it once the command is over, all in one request (POST
// /v1/sandboxes:run). It returns once the sandbox exists (Stream.Sandbox
// names it); an error before that, e.g. an invalid request or a create that
// failed, is returned here and leaves nothing behind. With req.Remove the
// server deletes the sandbox however the command ends, also when ctx ends
// first; Stream.RemoveError says whether that delete failed.
func (c *Client) StartRun(ctx context.Context, req api.RunRequest, o StreamOptions) (*Stream, error) {
	first, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("dsec client: encoding the run request: %w", err)
	}
	return c.startStream(ctx, "/v1/sandboxes:run", first, req.Exec.TTY, o, true)
}

// startStream opens a full-duplex NDJSON exchange whose first request line
// is first; with run, the answer's first event is the "sandbox" event.
func (c *Client) startStream(ctx context.Context, path string, first []byte, tty bool, o StreamOptions, run bool) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	s := &Stream{tty: tty, ctx: ctx, cancel: cancel, in: &inputWriter{enc: json.NewEncoder(pw)}, pw: pw, done: make(chan struct{})}
	// The request line goes first, whatever the input goroutines write later.
	body := io.MultiReader(bytes.NewReader(append(first, '\n')), pr)
	// The input pipe fails once the request is over (ctx ends: read and shut
	// cancel it) or its connection closed, so the transport never waits on it.
	hctx, _ := watchBody(ctx, func(err error) { pw.CloseWithError(err) })
	hreq, err := http.NewRequestWithContext(hctx, http.MethodPost, c.addr+path, body)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("dsec client: building request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/x-ndjson")
	setStepHeaders(ctx, hreq.Header)
	c.authorize(hreq)

	switch {
	case o.Stdin != nil:
		go s.pumpStdin(o.Stdin)
	case !tty:
		// Closed before anyone can write; the line follows the request line
		// once the transport reads the body.
		s.in.closed = true
		go func() { _ = s.in.send(api.StreamInput{EOF: true}) }()
	}
	if o.Signals != nil {
		go s.pumpSignals(o.Signals)
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		err = transportError(ctx, err) // before shut cancels ctx
		s.shut()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		err := decodeError(resp) // before shut's cancel could cut the answer short
		resp.Body.Close()
		s.shut()
		return nil, err
	}
	s.resp = resp
	s.dec = json.NewDecoder(bufio.NewReaderSize(resp.Body, 64<<10))
	if run {
		if err := s.readSandbox(); err != nil {
			resp.Body.Close()
			s.shut()
			return nil, err
		}
		if o.OnSandbox != nil {
			o.OnSandbox(s.sandbox)
		}
	}
	go s.read(o)
	return s, nil
}

// readSandbox reads a run's first event, the sandbox it created.
func (s *Stream) readSandbox() error {
	for {
		var ev api.StreamEvent
		if err := s.dec.Decode(&ev); err != nil {
			return fmt.Errorf("%w: %w", &api.Error{
				Code: api.CodeUnavailable, Message: "run stream ended before the sandbox event",
				Infrastructure: true,
			}, err)
		}
		switch {
		case ev.Type == "keepalive":
		case ev.Type == "sandbox" && ev.Sandbox != nil:
			s.sandbox = *ev.Sandbox
			return nil
		default:
			return fmt.Errorf("dsec client: a run stream began with a %q event, not the sandbox", ev.Type)
		}
	}
}

// Sandbox is the sandbox a run created (StartRun); zero for an exec stream.
func (s *Stream) Sandbox() api.Sandbox { return s.sandbox }

// RemoveError is, once Wait returned, why a run with Remove could not delete
// its sandbox after the command ended; nil when it was deleted.
func (s *Stream) RemoveError() error {
	<-s.done
	if s.removeErr == nil {
		return nil
	}
	return s.removeErr
}

// read consumes the events, then ends the request.
func (s *Stream) read(o StreamOptions) {
	defer close(s.done)
	res, err := readEvents(s.dec, o, &s.removeErr)
	s.pw.Close()
	_, _ = io.Copy(io.Discard, s.resp.Body) // let the connection be reused
	s.resp.Body.Close()
	if err != nil && s.ctx.Err() != nil {
		err = fmt.Errorf("dsec client: %w", s.ctx.Err())
	}
	s.res, s.err = res, err
	s.cancel()
}

// shut releases a stream that never started.
func (s *Stream) shut() {
	s.pw.Close()
	s.cancel()
}

// Wait blocks until the process exited (or the stream failed) and returns its
// result, which carries no output: it went to the writers.
func (s *Stream) Wait() (api.ExecResult, error) {
	<-s.done
	return s.res, s.err
}

// Close ends the request; a process still running is killed. It does not wait.
func (s *Stream) Close() error {
	s.cancel()
	return nil
}

// Write types p into the process's stdin (its terminal with a TTY). It fails
// once stdin was closed (CloseStdin, the end of StreamOptions.Stdin, or at once
// without a terminal and without StreamOptions.Stdin).
func (s *Stream) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := s.in.stdin(append([]byte(nil), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseStdin ends the process's stdin (on a terminal the server types the end of
// input, ^D, as a typist would). Closing twice is not an error.
func (s *Stream) CloseStdin() error { return s.in.eof() }

// Resize sets the terminal's size; the process gets SIGWINCH. Only for an exec
// started with req.TTY (an invalid_argument error otherwise, without sending).
func (s *Stream) Resize(cols, rows int) error {
	if !s.tty {
		return api.NewError(api.CodeInvalidArgument, "resize: the exec has no terminal (start it with tty)")
	}
	return s.in.send(api.StreamInput{Resize: &api.TermSize{Cols: cols, Rows: rows}})
}

// Signal sends sig ("SIGINT", "INT" or "2") to the process group (with a
// terminal: its foreground process group).
func (s *Stream) Signal(sig string) error { return s.in.send(api.StreamInput{Signal: sig}) }

func (s *Stream) pumpStdin(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if s.in.stdin(append([]byte(nil), buf[:n]...)) != nil {
				return
			}
		}
		if err != nil { // io.EOF or a failing reader: either way stdin ends
			_ = s.in.eof()
			return
		}
	}
}

func (s *Stream) pumpSignals(sigs <-chan string) {
	for {
		select {
		case sig, ok := <-sigs:
			if !ok || s.Signal(sig) != nil {
				return
			}
		case <-s.ctx.Done():
			return
		}
	}
}

// readEvents consumes the response's events until "exit" or "error"; an
// exit event's error (a run's failed delete) goes to exitErr.
func readEvents(dec *json.Decoder, o StreamOptions, exitErr **api.Error) (api.ExecResult, error) {
	for {
		var ev api.StreamEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			// The command may have run: unavailable, but not safely retryable.
			return api.ExecResult{}, fmt.Errorf("%w: %w", &api.Error{
				Code: api.CodeUnavailable, Message: "exec stream ended before the exit event",
				Infrastructure: true,
			}, err)
		}
		switch ev.Type {
		case "started":
			if o.OnStart != nil {
				o.OnStart(ev.PID)
			}
		case "stdout", "stderr":
			w := o.Stdout
			if ev.Type == "stderr" {
				w = o.Stderr
			}
			if w != nil {
				if _, err := w.Write(ev.Data); err != nil {
					return api.ExecResult{}, fmt.Errorf("dsec client: writing %s: %w", ev.Type, err)
				}
			}
		case "input_error":
			if o.OnInputError != nil && ev.Error != nil {
				ev.Error.Status = http.StatusBadRequest // what it would be as a response
				o.OnInputError(ev.Error)
			}
		case "exit":
			if ev.Result == nil {
				return api.ExecResult{}, errors.New("dsec client: exit event without a result")
			}
			if ev.Error != nil {
				ev.Error.Status = http.StatusOK
				*exitErr = ev.Error
			}
			return *ev.Result, nil
		case "error":
			if ev.Error == nil {
				ev.Error = api.NewError(api.CodeInternal, "exec stream failed")
			}
			ev.Error.Status = http.StatusOK
			return api.ExecResult{}, ev.Error
		}
	}
}

// errStdinClosed is returned by writes after the end of stdin.
var errStdinClosed = errors.New("dsec client: the exec's stdin is closed")

// inputWriter serializes StreamInput lines from the stdin, signal and resize
// callers and remembers the end of stdin.
type inputWriter struct {
	mu     sync.Mutex
	enc    *json.Encoder
	closed bool // EOF sent
}

func (w *inputWriter) send(v api.StreamInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enc.Encode(v)
}

func (w *inputWriter) stdin(p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errStdinClosed
	}
	return w.enc.Encode(api.StreamInput{Stdin: p})
}

func (w *inputWriter) eof() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.enc.Encode(api.StreamInput{EOF: true})
}
