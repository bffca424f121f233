package client

import (
	"bufio"
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

// StreamOptions are the live I/O of ExecStreamWithOptions.
type StreamOptions struct {
	// Stdin is streamed to the process; nil closes the process's stdin at once.
	Stdin io.Reader
	// Stdout and Stderr receive the output as it comes; nil discards it.
	Stdout, Stderr io.Writer
	// Signals delivers signals ("SIGTERM", "TERM" or "15") to the process group
	// while it runs.
	Signals <-chan string
	// OnStart, if set, is called with the process's PID once it started.
	OnStart func(pid int)
}

// ExecStream runs a command with live I/O over one full-duplex request: stdin is
// sent while output arrives. stdin nil closes the process's stdin at once. The
// result carries no output (it went to stdout and stderr).
func (c *Client) ExecStream(ctx context.Context, id string, req api.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (api.ExecResult, error) {
	return c.ExecStreamWithOptions(ctx, id, req, StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// ExecStreamWithOptions is ExecStream with signals and a start callback.
// Cancelling ctx ends the request, which kills the process.
func (c *Client) ExecStreamWithOptions(ctx context.Context, id string, req api.ExecRequest, o StreamOptions) (api.ExecResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	in := &inputWriter{enc: json.NewEncoder(pw)}
	done := make(chan struct{})
	defer close(done)
	defer pw.Close() // a clean end of the request body

	go func() {
		if err := in.send(req); err != nil {
			return
		}
		if o.Stdin == nil {
			_ = in.send(api.StreamInput{EOF: true})
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := o.Stdin.Read(buf)
			if n > 0 {
				if in.send(api.StreamInput{Stdin: append([]byte(nil), buf[:n]...)}) != nil {
					return
				}
			}
			if err != nil { // io.EOF or a failing reader: either way stdin ends
				_ = in.send(api.StreamInput{EOF: true})
				return
			}
		}
	}()
	if o.Signals != nil {
		go func() {
			for {
				select {
				case sig, ok := <-o.Signals:
					if !ok || in.send(api.StreamInput{Signal: sig}) != nil {
						return
					}
				case <-done:
					return
				}
			}
		}()
	}

	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.addr+sandboxPath(id, "/exec/stream"), pr)
	if err != nil {
		return api.ExecResult{}, fmt.Errorf("dsec client: building request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/x-ndjson")
	setStepHeaders(ctx, hreq.Header)
	c.authorize(hreq)
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return api.ExecResult{}, transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return api.ExecResult{}, decodeError(resp)
	}
	res, err := readEvents(resp.Body, o)
	pw.Close()
	_, _ = io.Copy(io.Discard, resp.Body) // let the connection be reused
	if err != nil && ctx.Err() != nil {
		return res, fmt.Errorf("dsec client: %w", ctx.Err())
	}
	return res, err
}

// readEvents consumes the response's events until "exit" or "error".
func readEvents(r io.Reader, o StreamOptions) (api.ExecResult, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 64<<10))
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
		case "exit":
			if ev.Result == nil {
				return api.ExecResult{}, errors.New("dsec client: exit event without a result")
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

// inputWriter serializes StreamInput lines from the stdin and signal goroutines.
type inputWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *inputWriter) send(v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enc.Encode(v)
}
