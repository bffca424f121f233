package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Streaming calls must end promptly whatever the server does: answer with an
// error before reading the request body, drop the connection, or go silent
// while the caller's context is cancelled.

// prompt is how long a call may take to notice an early end.
const prompt = 5 * time.Second

// blockingReader is a request body that never ends (a terminal's stdin, a pipe
// nobody writes to) until it is released.
type blockingReader struct{ release chan struct{} }

func newBlockingReader(t *testing.T) *blockingReader {
	r := &blockingReader{release: make(chan struct{})}
	t.Cleanup(func() { close(r.release) })
	return r
}

func (r *blockingReader) Read([]byte) (int, error) {
	<-r.release
	return 0, io.EOF
}

// early answers 409 without reading the request body, as the dsec server
// does (with Connection: close, so net/http does not wait to drain the body).
func early(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusConflict)
	_, _ = io.WriteString(w, `{"error":{"code":"conflict","message":"step 2 diverged"}}`)
}

// drop hijacks the connection after sending prefix (if any) and closes it.
func drop(prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		_, _ = buf.WriteString(prefix)
		_ = buf.Flush()
		conn.Close()
	}
}

// silent sends headers and an optional first chunk, then reads the request
// until the client goes away.
func silent(first string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex() // as the exec stream handler
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, first)
		w.(http.Flusher).Flush()
		_, _ = io.Copy(io.Discard, r.Body) // until the client goes
	}
}

func stubClient(t *testing.T, h http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return New(srv.URL, token, WithRetry(0))
}

// within runs f and fails the test if it has not returned after prompt.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	start := time.Now()
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		t.Logf("%s ended after %v: %v", what, time.Since(start).Round(time.Millisecond), err)
		return err
	case <-time.After(prompt):
		t.Fatalf("%s still running after %v", what, prompt)
		return nil
	}
}

func wantAPICode(t *testing.T, err error, code api.Code) {
	t.Helper()
	if ae, ok := api.AsError(err); !ok || ae.Code != code {
		t.Fatalf("error %v, want %s", err, code)
	}
}

func TestExecStreamEndsOnEarlyError(t *testing.T) {
	for name, o := range map[string]StreamOptions{
		"no stdin":      {},
		"endless stdin": {Stdin: newBlockingReader(t)},
		"tty, no stdin": {},
		"signals":       {Signals: make(chan string)},
	} {
		t.Run(name, func(t *testing.T) {
			c := stubClient(t, http.HandlerFunc(early))
			req := api.ExecRequest{Cmd: []string{"true"}, TTY: strings.HasPrefix(name, "tty")}
			err := within(t, "exec stream", func() error {
				_, err := c.ExecStreamWithOptions(context.Background(), "sb", req, o)
				return err
			})
			wantAPICode(t, err, api.CodeConflict)
		})
	}
}

func TestExecStreamEndsOnDroppedConnection(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"before the answer": drop(""),
		"mid stream": drop("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"1a\r\n{\"type\":\"started\",\"pid\":7}\n\r\n"),
	} {
		t.Run(name, func(t *testing.T) {
			c := stubClient(t, h)
			err := within(t, "exec stream", func() error {
				_, err := c.ExecStreamWithOptions(context.Background(), "sb", api.ExecRequest{Cmd: []string{"true"}, TTY: true},
					StreamOptions{Stdin: newBlockingReader(t)})
				return err
			})
			wantAPICode(t, err, api.CodeUnavailable)
		})
	}
}

func TestExecStreamEndsOnCancel(t *testing.T) {
	c := stubClient(t, silent(`{"type":"started","pid":7}`+"\n"))
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	err := within(t, "exec stream", func() error {
		_, err := c.ExecStreamWithOptions(ctx, "sb", api.ExecRequest{Cmd: []string{"sleep", "1000"}, TTY: true},
			StreamOptions{Stdin: newBlockingReader(t), OnStart: func(int) { close(started) }})
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

func TestUploadsEndOnEarlyError(t *testing.T) {
	c := stubClient(t, http.HandlerFunc(early))
	ctx := context.Background()
	for name, f := range map[string]func() error{
		"WriteFile": func() error { _, err := c.WriteFile(ctx, "sb", "/f", 0, newBlockingReader(t)); return err },
		"UploadTar": func() error { return c.UploadTar(ctx, "sb", "/d", newBlockingReader(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			wantAPICode(t, within(t, name, f), api.CodeConflict)
		})
	}
}

func TestUploadsEndOnDroppedConnection(t *testing.T) {
	c := stubClient(t, drop(""))
	ctx := context.Background()
	for name, f := range map[string]func() error{
		"WriteFile": func() error { _, err := c.WriteFile(ctx, "sb", "/f", 0, newBlockingReader(t)); return err },
		"UploadTar": func() error { return c.UploadTar(ctx, "sb", "/d", newBlockingReader(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			wantAPICode(t, within(t, name, f), api.CodeUnavailable)
		})
	}
}

func TestUploadsEndOnCancel(t *testing.T) {
	// The server waits for a body that never comes: only the context ends it.
	c := stubClient(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	for name, f := range map[string]func(context.Context) error{
		"WriteFile": func(ctx context.Context) error {
			_, err := c.WriteFile(ctx, "sb", "/f", 0, newBlockingReader(t))
			return err
		},
		"UploadTar": func(ctx context.Context) error { return c.UploadTar(ctx, "sb", "/d", newBlockingReader(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if err := within(t, name, func() error { return f(ctx) }); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want context.DeadlineExceeded", err)
			}
		})
	}
}

// downloads are the calls that return a body to read.
func downloads(c *Client) map[string]func(context.Context) (io.ReadCloser, error) {
	return map[string]func(context.Context) (io.ReadCloser, error){
		"ReadFile":    func(ctx context.Context) (io.ReadCloser, error) { return c.ReadFile(ctx, "sb", "/f") },
		"DownloadTar": func(ctx context.Context) (io.ReadCloser, error) { return c.DownloadTar(ctx, "sb", "/d") },
		"ProcessLogs": func(ctx context.Context) (io.ReadCloser, error) {
			return c.ProcessLogs(ctx, "sb", "1", "stdout", 0)
		},
	}
}

func TestDownloadsEndOnEarlyError(t *testing.T) {
	c := stubClient(t, http.HandlerFunc(early))
	for name, f := range downloads(c) {
		t.Run(name, func(t *testing.T) {
			err := within(t, name, func() error { _, err := f(context.Background()); return err })
			wantAPICode(t, err, api.CodeConflict)
		})
	}
}

func TestDownloadsEndOnDroppedConnection(t *testing.T) {
	// Headers and part of a 1000-byte body, then the connection goes.
	c := stubClient(t, drop("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial"))
	for name, f := range downloads(c) {
		t.Run(name, func(t *testing.T) {
			err := within(t, name, func() error {
				rc, err := f(context.Background())
				if err != nil {
					return err
				}
				defer rc.Close()
				_, err = io.ReadAll(rc)
				return err
			})
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v, want a truncated body", err)
			}
		})
	}
}

func TestDownloadsEndOnCancel(t *testing.T) {
	c := stubClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first bytes")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a GET: the server notices the client going
	}))
	for name, f := range downloads(c) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := within(t, name, func() error {
				rc, err := f(ctx)
				if err != nil {
					return err
				}
				defer rc.Close()
				buf := make([]byte, 64)
				if _, err := rc.Read(buf); err != nil {
					return err
				}
				cancel()
				_, err = io.ReadAll(rc)
				return err
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("error %v, want context.Canceled", err)
			}
		})
	}
}
