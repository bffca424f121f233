package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeTerminal is an exec/stream endpoint speaking the NDJSON protocol: it echoes
// stdin as stdout (as a terminal with echo does), reports every resize and signal
// as a line of output, and exits with 0 at the end of stdin. It records what it
// was asked for.
type fakeTerminal struct {
	mu    sync.Mutex
	first api.ExecRequest
	lines []api.StreamInput
}

func (f *fakeTerminal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/exec/stream") {
		http.NotFound(w, r)
		return
	}
	_ = http.NewResponseController(w).EnableFullDuplex()
	w.Header().Set("Connection", "close") // as the server: the body may be unread at the end
	sc := bufio.NewScanner(r.Body)
	if !sc.Scan() {
		http.Error(w, "empty", http.StatusBadRequest)
		return
	}
	var req api.ExecRequest
	if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.first = req
	f.mu.Unlock()
	if req.Cols > 1000 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.NewError(api.CodeInvalidArgument, "cols %d out of range", req.Cols)})
		return
	}
	enc := json.NewEncoder(w)
	emit := func(ev api.StreamEvent) {
		_ = enc.Encode(ev)
		w.(http.Flusher).Flush()
	}
	emit(api.StreamEvent{Type: "started", PID: 7})
	for sc.Scan() {
		var in api.StreamInput
		if err := json.Unmarshal(sc.Bytes(), &in); err != nil {
			emit(api.StreamEvent{Type: "error", Error: api.NewError(api.CodeInvalidArgument, "bad line")})
			return
		}
		f.mu.Lock()
		f.lines = append(f.lines, in)
		f.mu.Unlock()
		switch {
		case in.Resize != nil && in.Resize.Cols == 0:
			emit(api.StreamEvent{Type: "input_error", Error: api.NewError(api.CodeInvalidArgument, "terminal size 0x0")})
		case in.Resize != nil:
			emit(api.StreamEvent{Type: "stdout", Data: fmt.Appendf(nil, "[winch %dx%d]", in.Resize.Cols, in.Resize.Rows)})
		case in.Signal != "":
			emit(api.StreamEvent{Type: "stdout", Data: fmt.Appendf(nil, "[%s]", in.Signal)})
		case len(in.Stdin) > 0:
			emit(api.StreamEvent{Type: "stdout", Data: in.Stdin})
		}
		if in.EOF {
			break
		}
	}
	emit(api.StreamEvent{Type: "exit", Result: &api.ExecResult{ExitCode: 0}})
}

// syncBuffer is a bytes.Buffer safe to read while the stream writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls out until it contains want.
func waitFor(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	if !testwait.Until(5*time.Second, func() bool { return strings.Contains(out.String(), want) }) {
		t.Fatalf("output %q never contained %q", out.String(), want)
	}
}

func TestExecStreamTTY(t *testing.T) {
	ft := &fakeTerminal{}
	srv := httptest.NewServer(ft)
	defer srv.Close()
	c := New(srv.URL, token)
	ctx := context.Background()

	var out syncBuffer
	var pid int
	inputErrs := make(chan *api.Error, 1)
	s, err := c.StartExecStream(ctx, "sb", api.ExecRequest{Cmd: []string{"sh"}, TTY: true, Cols: 100, Rows: 30},
		StreamOptions{Stdout: &out, OnStart: func(p int) { pid = p }, OnInputError: func(e *api.Error) { inputErrs <- e }})
	if err != nil {
		t.Fatal(err)
	}
	// With a terminal and no Stdin reader, stdin stays open: typed keys arrive,
	// one at a time, each answered before the next.
	for _, k := range []string{"l", "s", "\r", "\x03"} {
		if _, err := s.Write([]byte(k)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, &out, k)
	}
	if err := s.Resize(132, 43); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "[winch 132x43]")
	// A refused line is reported and the stream goes on.
	if err := s.Resize(0, 0); err != nil {
		t.Fatal(err)
	}
	if e := <-inputErrs; e.Code != api.CodeInvalidArgument || e.Status != http.StatusBadRequest {
		t.Fatalf("input error %+v", e)
	}
	if err := s.Signal("SIGINT"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "[SIGINT]")
	if err := s.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("late")); err == nil {
		t.Fatal("write after CloseStdin succeeded")
	}
	res, err := s.Wait()
	if err != nil || res.ExitCode != 0 || pid != 7 {
		t.Fatalf("wait %+v %v pid %d", res, err, pid)
	}
	if got, want := out.String(), "ls\r\x03[winch 132x43][SIGINT]"; got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
	ft.mu.Lock()
	first, lines := ft.first, ft.lines
	ft.mu.Unlock()
	if !first.TTY || first.Cols != 100 || first.Rows != 30 {
		t.Fatalf("request line %+v", first)
	}
	if len(lines) != 8 || !lines[7].EOF {
		t.Fatalf("input lines %+v", lines)
	}

	// A terminal with a Stdin reader: the reader's bytes are typed, its end is EOF.
	out = syncBuffer{}
	res, err = c.ExecStreamWithOptions(ctx, "sb", api.ExecRequest{Cmd: []string{"cat"}, TTY: true},
		StreamOptions{Stdin: strings.NewReader("piped\n"), Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "piped\n" {
		t.Fatalf("piped %+v %v %q", res, err, out.String())
	}

	// A refusal before the start is the call's error.
	_, err = c.StartExecStream(ctx, "sb", api.ExecRequest{Cmd: []string{"sh"}, TTY: true, Cols: 5000}, StreamOptions{})
	wantCode(t, err, api.CodeInvalidArgument, http.StatusBadRequest)
}

func TestExecStreamResizeNeedsTTY(t *testing.T) {
	ft := &fakeTerminal{}
	srv := httptest.NewServer(ft)
	defer srv.Close()
	c := New(srv.URL, token)
	var out syncBuffer
	s, err := c.StartExecStream(context.Background(), "sb", api.ExecRequest{Cmd: []string{"cat"}}, StreamOptions{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Resize(80, 24)
	if ae, ok := api.AsError(err); !ok || ae.Code != api.CodeInvalidArgument {
		t.Fatalf("resize without a terminal: %v", err)
	}
	// Without a terminal and without Stdin, stdin is closed at once.
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("write to a closed stdin succeeded")
	}
	if _, err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.lines) != 1 || !ft.lines[0].EOF {
		t.Fatalf("sent %+v, want only EOF", ft.lines)
	}
}

func TestExecStreamClose(t *testing.T) {
	srv := httptest.NewServer(&fakeTerminal{})
	defer srv.Close()
	c := New(srv.URL, token)
	s, err := c.StartExecStream(context.Background(), "sb", api.ExecRequest{Cmd: []string{"sh"}, TTY: true}, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if _, err := s.Wait(); err == nil {
		t.Fatal("a closed stream reported success")
	}
}
