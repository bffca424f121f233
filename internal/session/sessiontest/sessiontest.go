// Package sessiontest is the conformance suite every session.Service
// implementation must pass: the node agent over a real driver, the agent over the
// mock driver, a network client of a remote node, and decorators such as the
// trajectory log. A test calls Run with the service and the request its sandboxes
// are created with; the image needs a POSIX shell with the usual utilities (sh,
// echo, cat, sleep, tty, stty) and either python3 or a busybox nc (dsec's default
// images qualify).
//
// The suite checks what a front end relies on, one behaviour per subtest: the
// sandbox lifecycle (create, idempotent create, get, list, delete, pause, resume,
// reset), blocking exec, streaming exec (stdin, stdout and stderr, the started
// callback, signals and resizes on Control, terminals), background processes
// (start, list, get, wait, kill, logs, follow), the file system (write, read, stat, list,
// mkdir, rename, remove, tar out and in), dial, and the error classes callers
// branch on (not_found for an unknown sandbox or process, invalid_argument for
// bad input). Every sandbox it creates is deleted when its subtest ends.
package sessiontest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testprog"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Options describe the service under test.
type Options struct {
	// Create is the request every sandbox of the suite is created with (backend,
	// image, limits); the suite may add labels and a request ID.
	Create api.CreateSandboxRequest
	// TTY says the service runs execs on a terminal when asked (tty: true). When
	// false, the suite requires a TTY request to fail with not_implemented.
	TTY bool
	// Pause says the backend can pause a sandbox. When false, the suite requires
	// Pause to fail with not_implemented.
	Pause bool
}

// opTimeout bounds every call of the suite, so a broken service fails a subtest
// instead of hanging the test binary.
const opTimeout = 60 * time.Second

// unknownID names a sandbox no service has.
const unknownID = "sb-0000000000000000.nowhere"

// Run runs the conformance suite against svc, a service as a role composes
// it: a malformed request is refused by the request validation on top
// (session.Validating), so a bare implementation runs under it.
func Run(t *testing.T, svc session.Service, opts Options) {
	s := &suite{svc: svc, opts: opts}
	t.Run("Info", s.testInfo)
	t.Run("CreateGetListDelete", s.testLifecycle)
	t.Run("CreateIdempotent", s.testIdempotent)
	t.Run("PauseResume", s.testPause)
	t.Run("Reset", s.testReset)
	t.Run("Exec", s.testExec)
	t.Run("ExecStream", s.testExecStream)
	t.Run("ExecStreamSignal", s.testExecStreamSignal)
	t.Run("ExecStreamResizeWithoutTTY", s.testResizeWithoutTTY)
	t.Run("ExecStreamTTY", s.testTTY)
	t.Run("Processes", s.testProcesses)
	t.Run("KillProcess", s.testKillProcess)
	t.Run("FollowProcess", s.testFollowProcess)
	t.Run("Files", s.testFiles)
	t.Run("FilesErrors", s.testFilesErrors)
	t.Run("Tar", s.testTar)
	t.Run("Dial", s.testDial)
	t.Run("NotFound", s.testNotFound)
}

type suite struct {
	svc  session.Service
	opts Options
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, what string, err error, code api.Code) {
	t.Helper()
	if !errdefs.Is(err, code) {
		t.Errorf("%s: error %v (code %s), want %s", what, err, errdefs.CodeOf(err), code)
	}
}

// create creates a sandbox from the suite's template and deletes it when the test
// ends.
func (s *suite) create(t *testing.T, mod func(*api.CreateSandboxRequest)) api.Sandbox {
	t.Helper()
	req := s.opts.Create
	if mod != nil {
		mod(&req)
	}
	sb, err := s.svc.Create(ctxT(t), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := s.svc.Delete(ctx, sb.ID); err != nil && !errdefs.Is(err, api.CodeNotFound) {
			t.Errorf("Delete(%s): %v", sb.ID, err)
		}
	})
	if sb.ID == "" || sb.State != api.StateRunning {
		t.Fatalf("new sandbox %+v: want an ID and state running", sb)
	}
	return sb
}

// sh runs a shell script to completion and fails the test unless it exits 0.
func (s *suite) sh(t *testing.T, id, script string) string {
	t.Helper()
	res, err := s.svc.Exec(ctxT(t), id, api.ExecRequest{Shell: script})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d signal %q stderr %q", script, res.ExitCode, res.Signal, res.Stderr)
	}
	return res.Stdout
}

func (s *suite) testInfo(t *testing.T) {
	info, err := s.svc.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Version == "" || info.Node == "" || len(info.Backends) == 0 {
		t.Errorf("Info %+v: want a version, a node and backends", info)
	}
	if b := s.opts.Create.Backend; b != "" && !slices.Contains(info.Backends, b) {
		t.Errorf("Info backends %v lack %q", info.Backends, b)
	}
}

func (s *suite) testLifecycle(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, func(r *api.CreateSandboxRequest) {
		r.Labels = map[string]string{"suite": "sessiontest"}
		r.Env = map[string]string{"SUITE_VAR": "v1"}
	})
	got, err := s.svc.Get(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || got.State != api.StateRunning || got.Labels["suite"] != "sessiontest" {
		t.Fatalf("Get(%s) = %+v, %v", sb.ID, got, err)
	}
	if out := s.sh(t, sb.ID, "echo $SUITE_VAR"); out != "v1\n" {
		t.Errorf("sandbox env: %q", out)
	}
	list, err := s.svc.List(ctx)
	if err != nil || !slices.ContainsFunc(list, func(x api.Sandbox) bool { return x.ID == sb.ID }) {
		t.Fatalf("List does not show %s: %v", sb.ID, err)
	}
	if err := s.svc.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = s.svc.Get(ctx, sb.ID)
	wantCode(t, "Get after Delete", err, api.CodeNotFound)
	wantCode(t, "Delete twice", s.svc.Delete(ctx, sb.ID), api.CodeNotFound)
	_, err = s.svc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "Exec after Delete", err, api.CodeNotFound)
	list, _ = s.svc.List(ctx)
	if slices.ContainsFunc(list, func(x api.Sandbox) bool { return x.ID == sb.ID }) {
		t.Errorf("List still shows deleted %s", sb.ID)
	}
}

func (s *suite) testIdempotent(t *testing.T) {
	key := fmt.Sprintf("sessiontest-%d", time.Now().UnixNano())
	a := s.create(t, func(r *api.CreateSandboxRequest) { r.RequestID = key })
	b := s.create(t, func(r *api.CreateSandboxRequest) { r.RequestID = key })
	if a.ID != b.ID {
		t.Fatalf("two creates with request ID %q made %s and %s", key, a.ID, b.ID)
	}
}

func (s *suite) testPause(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	p, err := s.svc.Pause(ctx, sb.ID)
	if !s.opts.Pause {
		wantCode(t, "Pause", err, api.CodeNotImplemented)
		return
	}
	if err != nil || p.State != api.StatePaused {
		t.Fatalf("Pause: %+v, %v", p, err)
	}
	_, err = s.svc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, "Exec while paused", err, api.CodeConflict)
	r, err := s.svc.Resume(ctx, sb.ID)
	if err != nil || r.State != api.StateRunning {
		t.Fatalf("Resume: %+v, %v", r, err)
	}
	s.sh(t, sb.ID, "true")
}

func (s *suite) testReset(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, func(r *api.CreateSandboxRequest) { r.Env = map[string]string{"KEPT": "yes"} })
	s.sh(t, sb.ID, "echo x > /tmp/scratch")
	got, err := s.svc.Reset(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || got.State != api.StateRunning {
		t.Fatalf("Reset: %+v, %v", got, err)
	}
	if out := s.sh(t, sb.ID, "test -e /tmp/scratch && echo still there; echo $KEPT"); out != "yes\n" {
		t.Errorf("after Reset: %q (want the file gone and the env kept)", out)
	}
}

func (s *suite) testExec(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	res, err := s.svc.Exec(ctx, sb.ID, api.ExecRequest{Shell: "cat; echo err >&2; pwd; echo $V; exit 3",
		Stdin: "in\n", Cwd: "/tmp", Env: map[string]string{"V": "env-ok"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Stdout != "in\n/tmp\nenv-ok\n" || res.Stderr != "err\n" {
		t.Errorf("exec result %+v", res)
	}
	res, err = s.svc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"/no/such/program"}})
	if err != nil || res.ExitCode != 127 {
		t.Errorf("missing program: %+v, %v (want exit 127 in the result)", res, err)
	}
	res, err = s.svc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "10"}, TimeoutMs: 200})
	if err != nil || !res.TimedOut {
		t.Errorf("timeout: %+v, %v", res, err)
	}
	for name, req := range map[string]api.ExecRequest{
		"no command":      {},
		"cmd and shell":   {Cmd: []string{"true"}, Shell: "true"},
		"tty on blocking": {Cmd: []string{"true"}, TTY: true},
	} {
		_, err := s.svc.Exec(ctx, sb.ID, req)
		wantCode(t, "Exec with "+name, err, api.CodeInvalidArgument)
	}
}

// syncBuffer is a writer safe for the stream's goroutines and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor polls cond until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stream is a running ExecStream.
type stream struct {
	stdin  *io.PipeWriter
	stdout syncBuffer
	stderr syncBuffer
	ctl    chan session.Control
	pid    chan int
	done   chan struct{}
	res    api.ExecResult
	err    error
}

func (s *suite) startStream(t *testing.T, id string, req api.ExecRequest) *stream {
	t.Helper()
	pr, pw := io.Pipe()
	st := &stream{stdin: pw, ctl: make(chan session.Control), pid: make(chan int, 1), done: make(chan struct{})}
	t.Cleanup(func() { pw.Close() })
	go func() {
		defer close(st.done)
		st.res, st.err = s.svc.ExecStream(ctxT(t), id, req, session.Stream{
			Stdin: pr, Stdout: &st.stdout, Stderr: &st.stderr, Control: st.ctl,
			Started: func(pid int) { st.pid <- pid },
		})
		pr.Close()
	}()
	return st
}

// started waits for the started callback and returns the PID.
func (st *stream) started(t *testing.T) int {
	t.Helper()
	select {
	case pid := <-st.pid:
		return pid
	case <-st.done:
		t.Fatalf("stream ended before it started: %+v, %v", st.res, st.err)
	case <-time.After(opTimeout):
		t.Fatal("stream did not start")
	}
	return 0
}

// send delivers one control message while the stream runs.
func (st *stream) send(t *testing.T, c session.Control) {
	t.Helper()
	select {
	case st.ctl <- c:
	case <-st.done:
		t.Fatalf("stream ended before control %+v was taken: %+v, %v", c, st.res, st.err)
	case <-time.After(opTimeout):
		t.Fatalf("control %+v not taken", c)
	}
}

// wait waits for the stream's end.
func (st *stream) wait(t *testing.T) (api.ExecResult, error) {
	t.Helper()
	select {
	case <-st.done:
	case <-time.After(opTimeout):
		t.Fatal("stream did not end")
	}
	return st.res, st.err
}

func (s *suite) testExecStream(t *testing.T) {
	sb := s.create(t, nil)
	st := s.startStream(t, sb.ID, api.ExecRequest{Shell: "while read l; do echo got:$l; done; echo bye >&2; exit 5"})
	if pid := st.started(t); pid <= 0 {
		t.Errorf("started with pid %d", pid)
	}
	if _, err := io.WriteString(st.stdin, "one\n"); err != nil {
		t.Fatal(err)
	}
	// Output arrives while the process still runs.
	waitFor(t, 10*time.Second, "the first line's echo", func() bool { return st.stdout.String() == "got:one\n" })
	io.WriteString(st.stdin, "two\n")
	st.stdin.Close()
	res, err := st.wait(t)
	if err != nil || res.ExitCode != 5 {
		t.Fatalf("stream result %+v, %v", res, err)
	}
	if st.stdout.String() != "got:one\ngot:two\n" || st.stderr.String() != "bye\n" {
		t.Errorf("stdout %q stderr %q", st.stdout.String(), st.stderr.String())
	}
	if res.Stdout != "" || res.Stderr != "" {
		t.Errorf("the streamed result carries output: %+v", res)
	}
	// No stdin, no writers: the process sees EOF and the output is dropped.
	res, err = s.svc.ExecStream(ctxT(t), sb.ID, api.ExecRequest{Shell: "cat; echo dropped"}, session.Stream{})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("stream without stdio: %+v, %v", res, err)
	}
}

func (s *suite) testExecStreamSignal(t *testing.T) {
	sb := s.create(t, nil)
	st := s.startStream(t, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "30"}})
	st.started(t)
	t0 := time.Now()
	st.send(t, session.Control{Signal: 15})
	res, err := st.wait(t)
	if err != nil || res.Signal != "SIGTERM" || res.ExitCode != -1 {
		t.Fatalf("after SIGTERM: %+v, %v", res, err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("SIGTERM took %v to end the process", d)
	}
}

// A resize of an exec without a terminal changes nothing: the exec goes on.
func (s *suite) testResizeWithoutTTY(t *testing.T) {
	sb := s.create(t, nil)
	st := s.startStream(t, sb.ID, api.ExecRequest{Cmd: []string{"cat"}})
	st.started(t)
	st.send(t, session.Control{Resize: &api.TermSize{Cols: 100, Rows: 40}})
	io.WriteString(st.stdin, "after resize")
	st.stdin.Close()
	res, err := st.wait(t)
	if err != nil || res.ExitCode != 0 || st.stdout.String() != "after resize" {
		t.Fatalf("stream after a resize: %+v, %v, stdout %q", res, err, st.stdout.String())
	}
}

func (s *suite) testTTY(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	for _, bad := range []api.ExecRequest{
		{Cmd: []string{"true"}, TTY: true, Cols: 1001, Rows: 24},
		{Cmd: []string{"true"}, TTY: true, Cols: 80},
		{Cmd: []string{"true"}, Cols: 80, Rows: 24},
	} {
		_, err := s.svc.ExecStream(ctx, sb.ID, bad, session.Stream{})
		wantCode(t, fmt.Sprintf("ExecStream tty=%v %dx%d", bad.TTY, bad.Cols, bad.Rows), err, api.CodeInvalidArgument)
	}
	req := api.ExecRequest{Shell: "tty; stty size; echo err >&2", TTY: true, Cols: 100, Rows: 30}
	if !s.opts.TTY {
		var out syncBuffer
		_, err := s.svc.ExecStream(ctx, sb.ID, req, session.Stream{Stdout: &out, Stderr: &out})
		wantCode(t, "ExecStream with tty", err, api.CodeNotImplemented)
		if out.String() != "" {
			t.Errorf("a refused TTY exec ran: %q", out.String())
		}
		_, err = s.svc.StartProcess(ctx, sb.ID, req)
		wantCode(t, "StartProcess with tty", err, api.CodeNotImplemented)
		return
	}
	var out syncBuffer
	res, err := s.svc.ExecStream(ctx, sb.ID, req, session.Stream{Stdout: &out, Stderr: failWriter{t}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("tty exec: %+v, %v", res, err)
	}
	got := strings.ReplaceAll(out.String(), "\r\n", "\n")
	if !strings.HasPrefix(got, "/dev/pts/") || !strings.Contains(got, "\n30 100\n") || !strings.Contains(got, "err\n") {
		t.Errorf("tty output %q: want a /dev/pts name, size 30 100 and stderr on the terminal", got)
	}
	// A resize reaches the program as its new size.
	st := s.startStream(t, sb.ID, api.ExecRequest{Shell: "read l; stty size", TTY: true})
	st.started(t)
	st.send(t, session.Control{Resize: &api.TermSize{Cols: 132, Rows: 43}})
	io.WriteString(st.stdin, "go\r")
	if res, err := st.wait(t); err != nil || res.ExitCode != 0 {
		t.Fatalf("resized tty exec: %+v, %v", res, err)
	}
	if got := st.stdout.String(); !strings.Contains(got, "43 132") {
		t.Errorf("after resize: %q, want size 43 132", got)
	}
}

// failWriter fails the test when written to (stderr of a TTY exec).
type failWriter struct{ t *testing.T }

func (f failWriter) Write(p []byte) (int, error) {
	f.t.Errorf("a TTY exec wrote %q to Stderr; its terminal is Stdout", p)
	return len(p), nil
}

func (s *suite) logs(t *testing.T, id, procID, stream string, offset int64) string {
	t.Helper()
	rc, err := s.svc.ProcessLogs(ctxT(t), id, procID, stream, offset)
	if err != nil {
		t.Fatalf("ProcessLogs(%s, %s): %v", procID, stream, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (s *suite) testProcesses(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	p, err := s.svc.StartProcess(ctx, sb.ID, api.ExecRequest{Shell: "cat; echo out; echo err >&2; exit 3", Stdin: "in-"})
	if err != nil || p.ID == "" || p.PID <= 0 {
		t.Fatalf("StartProcess: %+v, %v", p, err)
	}
	got, err := s.svc.WaitProcess(ctx, sb.ID, p.ID)
	if err != nil || got.Running || got.Result == nil || got.Result.ExitCode != 3 {
		t.Fatalf("WaitProcess: %+v, %v", got, err)
	}
	if got, err := s.svc.GetProcess(ctx, sb.ID, p.ID); err != nil || got.Running || got.ID != p.ID {
		t.Errorf("GetProcess: %+v, %v", got, err)
	}
	list, err := s.svc.ListProcesses(ctx, sb.ID)
	if err != nil || !slices.ContainsFunc(list, func(x api.Process) bool { return x.ID == p.ID }) {
		t.Errorf("ListProcesses: %+v, %v", list, err)
	}
	if out := s.logs(t, sb.ID, p.ID, "stdout", 0); out != "in-out\n" {
		t.Errorf("stdout log %q", out)
	}
	if out := s.logs(t, sb.ID, p.ID, "stdout", 3); out != "out\n" {
		t.Errorf("stdout log from offset 3: %q", out)
	}
	if out := s.logs(t, sb.ID, p.ID, "stderr", 0); out != "err\n" {
		t.Errorf("stderr log %q", out)
	}
	_, err = s.svc.ProcessLogs(ctx, sb.ID, p.ID, "stdin", 0)
	wantCode(t, "ProcessLogs of stdin", err, api.CodeInvalidArgument)
	// A wait bounded by its context returns the still-running process.
	long, err := s.svc.StartProcess(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	got, err = s.svc.WaitProcess(wctx, sb.ID, long.ID)
	cancel()
	if err != nil || !got.Running {
		t.Errorf("bounded WaitProcess: %+v, %v (want running, no error)", got, err)
	}
}

// follow calls FollowProcess until the process has ended and all its output
// is read, from the offsets of what out already holds.
func (s *suite) follow(t *testing.T, id, procID string, out *api.ProcessOutput, maxBytes int) {
	t.Helper()
	for !out.Ended {
		got, err := s.svc.FollowProcess(ctxT(t), id, procID, api.FollowRequest{
			StdoutOffset: int64(len(out.Stdout)), StderrOffset: int64(len(out.Stderr)), WaitMs: 30_000, MaxBytes: maxBytes,
		})
		if err != nil {
			t.Fatalf("FollowProcess: %v", err)
		}
		if maxBytes > 0 && (len(got.Stdout) > maxBytes || len(got.Stderr) > maxBytes) {
			t.Fatalf("FollowProcess with max_bytes %d answered %d+%d bytes", maxBytes, len(got.Stdout), len(got.Stderr))
		}
		if got.Ended && got.Process.Running {
			t.Fatalf("FollowProcess: ended, but the process runs: %+v", got.Process)
		}
		out.Stdout, out.Stderr = append(out.Stdout, got.Stdout...), append(out.Stderr, got.Stderr...)
		out.Process, out.Ended = got.Process, got.Ended
	}
}

func (s *suite) testFollowProcess(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	p, err := s.svc.StartProcess(ctx, sb.ID, api.ExecRequest{Shell: "echo first; read l; sleep 0.5; echo \"$l\" >&2; read l; echo last; exit 3", OpenStdin: true})
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	// The first line comes without waiting for the rest.
	var out api.ProcessOutput
	for len(out.Stdout) < len("first\n") {
		got, err := s.svc.FollowProcess(ctx, sb.ID, p.ID, api.FollowRequest{StdoutOffset: int64(len(out.Stdout)), WaitMs: 30_000})
		if err != nil || got.Ended || !got.Process.Running {
			t.Fatalf("FollowProcess before input: %+v, %v (want output of a running process)", got, err)
		}
		out.Stdout = append(out.Stdout, got.Stdout...)
	}
	if string(out.Stdout) != "first\n" {
		t.Fatalf("stdout before input %q, want %q", out.Stdout, "first\n")
	}
	// Nothing more until the input: an answer at once, and a bounded wait
	// that ends running, with no output and no error.
	got, err := s.svc.FollowProcess(ctx, sb.ID, p.ID, api.FollowRequest{StdoutOffset: 6})
	if err != nil || len(got.Stdout)+len(got.Stderr) != 0 || got.Ended || !got.Process.Running {
		t.Fatalf("FollowProcess without a wait: %+v, %v", got, err)
	}
	t0 := time.Now()
	got, err = s.svc.FollowProcess(ctx, sb.ID, p.ID, api.FollowRequest{StdoutOffset: 6, WaitMs: 200})
	if err != nil || len(got.Stdout)+len(got.Stderr) != 0 || got.Ended || !got.Process.Running {
		t.Fatalf("bounded FollowProcess: %+v, %v (want running, no output, no error)", got, err)
	}
	if d := time.Since(t0); d < 150*time.Millisecond {
		t.Errorf("FollowProcess with wait_ms 200 answered after %v with nothing to say", d)
	}
	// A waiting follower wakes on the output the input causes (half a second
	// later, while the process goes on running), long before its wait ends.
	type answer struct {
		out api.ProcessOutput
		err error
	}
	woke := make(chan answer, 1)
	go func() {
		got, err := s.svc.FollowProcess(ctx, sb.ID, p.ID, api.FollowRequest{StdoutOffset: 6, WaitMs: 50_000})
		woke <- answer{got, err}
	}()
	t0 = time.Now()
	if err := s.svc.SendProcessInput(ctx, sb.ID, p.ID, api.ProcessInput{Data: []byte("middle\n")}); err != nil {
		t.Fatalf("SendProcessInput: %v", err)
	}
	a := <-woke
	if a.err != nil || len(a.out.Stdout)+len(a.out.Stderr) == 0 {
		t.Fatalf("waiting FollowProcess: %+v, %v (want output)", a.out, a.err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("waiting FollowProcess answered %v after the output", d)
	}
	out.Stdout, out.Stderr = append(out.Stdout, a.out.Stdout...), append(out.Stderr, a.out.Stderr...)
	if err := s.svc.SendProcessInput(ctx, sb.ID, p.ID, api.ProcessInput{Data: []byte("end\n")}); err != nil {
		t.Fatalf("SendProcessInput: %v", err)
	}
	s.follow(t, sb.ID, p.ID, &out, 0)
	if string(out.Stdout) != "first\nlast\n" || string(out.Stderr) != "middle\n" {
		t.Errorf("followed stdout %q, stderr %q", out.Stdout, out.Stderr)
	}
	if r := out.Process.Result; r == nil || r.ExitCode != 3 {
		t.Errorf("followed to the end: result %+v, want exit code 3", r)
	}
	// An answer carries at most max_bytes of each stream; the rest follows.
	big, err := s.svc.StartProcess(ctx, sb.ID, api.ExecRequest{Shell: "i=0; while [ $i -lt 500 ]; do echo 0123456789abcdefghi; i=$((i+1)); done"})
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	out = api.ProcessOutput{}
	s.follow(t, sb.ID, big.ID, &out, 1000)
	if want := strings.Repeat("0123456789abcdefghi\n", 500); string(out.Stdout) != want {
		t.Errorf("followed %d bytes in answers of at most 1000, want %d", len(out.Stdout), len(want))
	}
	_, err = s.svc.FollowProcess(ctx, sb.ID, p.ID, api.FollowRequest{StdoutOffset: -1})
	wantCode(t, "FollowProcess from a negative offset", err, api.CodeInvalidArgument)
	_, err = s.svc.FollowProcess(ctx, sb.ID, p.ID, api.FollowRequest{WaitMs: api.MaxFollowWaitMs + 1})
	wantCode(t, "FollowProcess with too long a wait", err, api.CodeInvalidArgument)
	_, err = s.svc.FollowProcess(ctx, sb.ID, "no-such-proc", api.FollowRequest{})
	wantCode(t, "FollowProcess of an unknown process", err, api.CodeNotFound)
}

func (s *suite) testKillProcess(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	p, err := s.svc.StartProcess(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.svc.KillProcess(ctx, sb.ID, p.ID, 15); err != nil {
		t.Fatalf("KillProcess: %v", err)
	}
	got, err := s.svc.WaitProcess(ctx, sb.ID, p.ID)
	if err != nil || got.Running || got.Result == nil || got.Result.Signal != "SIGTERM" {
		t.Fatalf("after kill: %+v (%+v), %v", got, got.Result, err)
	}
	wantCode(t, "KillProcess after exit", s.svc.KillProcess(ctx, sb.ID, p.ID, 9), api.CodeConflict)
}

// fs opens the sandbox's file system and closes it when the test ends.
func (s *suite) fs(t *testing.T, id string) session.FS {
	t.Helper()
	fs, err := s.svc.FS(ctxT(t), id)
	if err != nil {
		t.Fatalf("FS: %v", err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}

func (s *suite) read(t *testing.T, fs session.FS, path string) string {
	t.Helper()
	rc, info, err := fs.Open(ctxT(t), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(b)) || info.Type != "file" {
		t.Errorf("Open(%s) info %+v for %d bytes", path, info, len(b))
	}
	return string(b)
}

func (s *suite) testFiles(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	fs := s.fs(t, sb.ID)
	info, err := fs.WriteFile(ctx, "/tmp/a.txt", 0o640, strings.NewReader("hello"), 1<<20)
	if err != nil || info.Size != 5 || info.Mode != 0o640 || info.Type != "file" {
		t.Fatalf("WriteFile: %+v, %v", info, err)
	}
	// The sandbox's processes see what the FS wrote, and the other way round.
	if out := s.sh(t, sb.ID, "cat /tmp/a.txt; echo made > /tmp/b.txt"); out != "hello" {
		t.Errorf("exec sees %q", out)
	}
	if got := s.read(t, fs, "/tmp/b.txt"); got != "made\n" {
		t.Errorf("read %q", got)
	}
	if st, err := fs.Stat(ctx, "/tmp/a.txt"); err != nil || st.Size != 5 || st.Name != "a.txt" {
		t.Errorf("Stat: %+v, %v", st, err)
	}
	d, err := fs.Mkdir(ctx, "/tmp/d/e", 0o750, true)
	if err != nil || d.Type != "dir" || d.Mode != 0o750 {
		t.Fatalf("Mkdir: %+v, %v", d, err)
	}
	_, err = fs.Mkdir(ctx, "/tmp/d/e", 0, false)
	wantCode(t, "Mkdir of an existing directory", err, api.CodeAlreadyExists)
	if err := fs.Rename(ctx, "/tmp/a.txt", "/tmp/d/e/moved.txt"); err != nil {
		t.Fatalf("Rename: %v", err)
	}
	if got := s.read(t, fs, "/tmp/d/e/moved.txt"); got != "hello" {
		t.Errorf("after Rename: %q", got)
	}
	_, err = fs.Stat(ctx, "/tmp/a.txt")
	wantCode(t, "Stat of the renamed file's old path", err, api.CodeNotFound)
	list, err := fs.List(ctx, "/tmp/d/e")
	if err != nil || len(list) != 1 || list[0].Name != "moved.txt" {
		t.Errorf("List: %+v, %v", list, err)
	}
	wantCode(t, "Remove of a non-empty directory", fs.Remove(ctx, "/tmp/d", false), api.CodeConflict)
	if err := fs.Remove(ctx, "/tmp/d", true); err != nil {
		t.Fatalf("recursive Remove: %v", err)
	}
	if out := s.sh(t, sb.ID, "test -e /tmp/d || echo gone"); out != "gone\n" {
		t.Errorf("after Remove: %q", out)
	}
	// Paths cannot leave the sandbox: "/../../x" is "/x".
	if _, err := fs.WriteFile(ctx, "/../../tmp/up.txt", 0o644, strings.NewReader("in"), 10); err != nil {
		t.Fatal(err)
	}
	if out := s.sh(t, sb.ID, "cat /tmp/up.txt"); out != "in" {
		t.Errorf("/../../tmp/up.txt landed elsewhere: %q", out)
	}
}

func (s *suite) testFilesErrors(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	fs := s.fs(t, sb.ID)
	_, _, err := fs.Open(ctx, "/no/such/file")
	wantCode(t, "Open of a missing file", err, api.CodeNotFound)
	_, _, err = fs.Open(ctx, "/tmp")
	wantCode(t, "Open of a directory", err, api.CodeInvalidArgument)
	_, err = fs.List(ctx, "/nope")
	wantCode(t, "List of a missing directory", err, api.CodeNotFound)
	_, err = fs.WriteFile(ctx, "/tmp/big", 0o644, strings.NewReader(strings.Repeat("x", 100)), 10)
	wantCode(t, "WriteFile over max", err, api.CodePayloadTooLarge)
	_, err = fs.WriteFile(ctx, "", 0o644, strings.NewReader("x"), 10)
	wantCode(t, "WriteFile of an empty path", err, api.CodeInvalidArgument)
	wantCode(t, "Rename of a missing file", fs.Rename(ctx, "/nope", "/tmp/x"), api.CodeNotFound)
	wantCode(t, "Rename of /", fs.Rename(ctx, "/", "/tmp/x"), api.CodeInvalidArgument)
	wantCode(t, "Remove of /", fs.Remove(ctx, "/", true), api.CodeInvalidArgument)
	wantCode(t, "Remove of a missing file", fs.Remove(ctx, "/nope", false), api.CodeNotFound)
}

func (s *suite) testTar(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	fs := s.fs(t, sb.ID)
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, e := range []struct{ name, body string }{{"dir/", ""}, {"dir/f1", "one"}, {"dir/sub/f2", "two"}} {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	if _, err := fs.Mkdir(ctx, "/tmp/x", 0, true); err != nil {
		t.Fatal(err)
	}
	if err := fs.ExtractTar(ctx, "/tmp/x", &in); err != nil {
		t.Fatalf("ExtractTar: %v", err)
	}
	if out := s.sh(t, sb.ID, "cat /tmp/x/dir/f1 /tmp/x/dir/sub/f2"); out != "onetwo" {
		t.Errorf("extracted %q", out)
	}
	var out bytes.Buffer
	if err := fs.WriteTar(ctx, "/tmp/x/dir", &out); err != nil {
		t.Fatalf("WriteTar: %v", err)
	}
	files := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeReg {
			files[strings.TrimPrefix(h.Name, "./")] = string(b)
		}
	}
	if len(files) != 2 || !hasSuffixValue(files, "f1", "one") || !hasSuffixValue(files, "sub/f2", "two") {
		t.Errorf("tar of /tmp/x/dir: %v", files)
	}
	err := fs.ExtractTar(ctx, "/tmp/x", strings.NewReader("this is not a tar stream, not even close to one......"))
	wantCode(t, "ExtractTar of garbage", err, api.CodeInvalidArgument)
	err = fs.WriteTar(ctx, "/no/such", io.Discard)
	wantCode(t, "WriteTar of a missing path", err, api.CodeNotFound)
}

func hasSuffixValue(m map[string]string, suffix, want string) bool {
	for k, v := range m {
		if strings.HasSuffix(k, suffix) && v == want {
			return true
		}
	}
	return false
}

// listener accepts one connection on port and sends "hello\n".
func listener(port int) api.ExecRequest {
	script, env := testprog.Listener(port)
	return api.ExecRequest{Shell: script, Env: env}
}

func (s *suite) testDial(t *testing.T) {
	ctx := ctxT(t)
	sb := s.create(t, nil)
	const port = 8472
	if _, err := s.svc.StartProcess(ctx, sb.ID, listener(port)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := s.svc.Dial(dctx, sb.ID, port)
		cancel()
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(io.LimitReader(conn, 6))
			conn.Close()
			if err != nil || string(got) != "hello\n" {
				t.Errorf("read from the sandbox's listener: %q, %v", got, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Dial(%d) never reached the listener: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if c, err := s.svc.Dial(dctx, sb.ID, port+1); err == nil {
		c.Close()
		t.Error("Dial to a closed port succeeded")
	}
	for _, bad := range []int{0, -1, 65536} {
		_, err := s.svc.Dial(ctx, sb.ID, bad)
		wantCode(t, fmt.Sprintf("Dial(%d)", bad), err, api.CodeInvalidArgument)
	}
}

// testNotFound: every operation on an unknown sandbox, and on an unknown process
// of a real one, is not_found.
func (s *suite) testNotFound(t *testing.T) {
	ctx := ctxT(t)
	id := unknownID
	check := func(what string, err error) { t.Helper(); wantCode(t, what, err, api.CodeNotFound) }
	_, err := s.svc.Get(ctx, id)
	check("Get", err)
	check("Delete", s.svc.Delete(ctx, id))
	_, err = s.svc.Pause(ctx, id)
	check("Pause", err)
	_, err = s.svc.Resume(ctx, id)
	check("Resume", err)
	_, err = s.svc.Reset(ctx, id)
	check("Reset", err)
	_, err = s.svc.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
	check("Exec", err)
	_, err = s.svc.ExecStream(ctx, id, api.ExecRequest{Cmd: []string{"true"}}, session.Stream{})
	check("ExecStream", err)
	_, err = s.svc.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
	check("StartProcess", err)
	_, err = s.svc.ListProcesses(ctx, id)
	check("ListProcesses", err)
	_, err = s.svc.GetProcess(ctx, id, "p1")
	check("GetProcess", err)
	_, err = s.svc.WaitProcess(ctx, id, "p1")
	check("WaitProcess", err)
	check("KillProcess", s.svc.KillProcess(ctx, id, "p1", 9))
	_, err = s.svc.ProcessLogs(ctx, id, "p1", "stdout", 0)
	check("ProcessLogs", err)
	_, err = s.svc.FS(ctx, id)
	check("FS", err)
	_, err = s.svc.Dial(ctx, id, 80)
	check("Dial", err)

	sb := s.create(t, nil)
	_, err = s.svc.GetProcess(ctx, sb.ID, "no-such-proc")
	check("GetProcess of an unknown process", err)
	_, err = s.svc.WaitProcess(ctx, sb.ID, "no-such-proc")
	check("WaitProcess of an unknown process", err)
	check("KillProcess of an unknown process", s.svc.KillProcess(ctx, sb.ID, "no-such-proc", 9))
	_, err = s.svc.ProcessLogs(ctx, sb.ID, "no-such-proc", "stdout", 0)
	check("ProcessLogs of an unknown process", err)
}
