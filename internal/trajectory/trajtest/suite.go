// Package trajtest is the conformance suite of the trajectory decorator: it wraps
// a session.Service with trajectory.Wrap and checks the replay rules through the
// session interface alone (replay, divergence, outcome_unknown after a simulated
// crash, lost sandboxes, rebuild, FnCall and HTTP steps, stream replay). Node
// runs it without root (the node agent over the mock driver, NodeHarness); the
// same suite runs against the agent over the container driver (see Harness).
package trajtest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Harness is what the suite needs from an implementation. The commands the suite
// runs are `echo`, `cat` and `sh -c "exit N"` / `sh -c "echo X >&2"`, which the
// host (for Node) and any Linux image have; files live under /tmp.
type Harness struct {
	// Service returns the session service to wrap (one per test).
	Service func(t *testing.T) session.Service
	// Store opens a fresh trajectory store; Restart simulates a crash of the
	// server process: the store as the next process sees it (the old instance may
	// be closed).
	Store   func(t *testing.T) trajectory.Store
	Restart func(t *testing.T, s trajectory.Store) trajectory.Store
	// Create is the request the suite creates sandboxes with.
	Create api.CreateSandboxRequest
	// Runs, if set, counts the operations the service ran: the suite checks that a
	// replay runs nothing.
	Runs func(svc session.Service) int
	// Fail, if set, makes the service's next call of method ("Exec") fail with
	// err.
	Fail func(svc session.Service, method string, err error)
	// Kill, if set, makes a sandbox's init exit.
	Kill func(t *testing.T, svc session.Service, id string)
	// Serve, if set, makes an HTTP server answer on a port of sandbox id (the
	// suite's handler) and returns the port.
	Serve func(t *testing.T, svc session.Service, id string, h http.Handler) int
	// FnCall says the service runs FnCalls (the FnCall tests run only then).
	FnCall bool
}

// Run runs every test of the suite the harness supports (the tests that need an
// optional hook, such as Fail or Serve, run only with it; the others are named
// in the log, not skipped).
func Run(t *testing.T, h Harness) {
	s := &suite{h: h}
	needs := map[string]bool{
		"RetryableNotLogged": h.Fail != nil,
		"InitExited":         h.Kill != nil,
		"FnCall":             h.FnCall,
		"HTTP":               h.Serve != nil,
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Untagged", s.testUntagged},
		{"ExecReplay", s.testExecReplay},
		{"Rules", s.testRules},
		{"Files", s.testFiles},
		{"StreamReplay", s.testStreamReplay},
		{"ProcessReplay", s.testProcessReplay},
		{"OutcomeUnknownAfterCrash", s.testOutcomeUnknown},
		{"RunningNow", s.testRunningNow},
		{"ClientGoneMidStream", s.testClientGone},
		{"RetryableNotLogged", s.testRetryable},
		{"SandboxLostAndRebuild", s.testLostAndRebuild},
		{"InitExited", s.testInitExited},
		{"FnCall", s.testFnCall},
		{"HTTP", s.testHTTP},
	} {
		if ok, listed := needs[tc.name]; listed && !ok {
			t.Logf("%s: not run, the harness or service lacks what it needs", tc.name)
			continue
		}
		t.Run(tc.name, tc.fn)
	}
}

type suite struct{ h Harness }

// env is one test's wrapped service.
type env struct {
	t     *testing.T
	h     Harness
	inner session.Service
	store trajectory.Store
	svc   *trajectory.Service
}

func (s *suite) env(t *testing.T) *env {
	inner := s.h.Service(t)
	store := s.h.Store(t)
	e := &env{t: t, h: s.h, inner: inner, store: store}
	e.svc = trajectory.Wrap(inner, store, trajectory.Options{TempDir: t.TempDir()})
	return e
}

// restart simulates a crash and a new server process on the same log.
func (e *env) restart() {
	e.store = e.h.Restart(e.t, e.store)
	e.svc = trajectory.Wrap(e.inner, e.store, trajectory.Options{TempDir: e.t.TempDir()})
}

func (e *env) create() string {
	e.t.Helper()
	sb, err := e.inner.Create(context.Background(), e.h.Create)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.inner.Delete(context.Background(), sb.ID) })
	return sb.ID
}

func (e *env) runs() int {
	if e.h.Runs == nil {
		return -1
	}
	return e.h.Runs(e.inner)
}

// noRun checks that nothing ran since before (when the harness counts).
func (e *env) noRun(before int, what string) {
	e.t.Helper()
	if before >= 0 && e.runs() != before {
		e.t.Fatalf("%s ran something: %d operations before, %d after", what, before, e.runs())
	}
}

func step(traj string, n int) (context.Context, *session.StepOutcome) {
	return session.WithStep(context.Background(), session.Step{Trajectory: traj, N: n})
}

func code(err error) api.Code {
	if err == nil {
		return ""
	}
	return errdefs.CodeOf(err)
}

func wantCode(t *testing.T, err error, c api.Code) {
	t.Helper()
	if code(err) != c {
		t.Fatalf("want %s, got %v", c, err)
	}
	if e, ok := api.AsError(err); ok && e.Status != 0 && e.Status != api.StatusOf(c) {
		t.Fatalf("%s with status %d", c, e.Status)
	}
}

func echo(args ...string) api.ExecRequest {
	return api.ExecRequest{Cmd: append([]string{"echo"}, args...)}
}

func exit(code int) api.ExecRequest {
	return api.ExecRequest{Cmd: []string{"sh", "-c", fmt.Sprintf("exit %d", code)}}
}

func (e *env) exec(traj string, n int, id string, req api.ExecRequest) (api.ExecResult, bool, error) {
	ctx, out := step(traj, n)
	res, err := e.svc.Exec(ctx, id, req)
	return res, out.Replayed, err
}

func (e *env) get(traj string) api.Trajectory {
	e.t.Helper()
	tr, err := e.svc.GetTrajectory(context.Background(), traj)
	if err != nil {
		e.t.Fatal(err)
	}
	return tr
}

// wantCounts checks a trajectory's replay and divergence counts, as listed and
// as read alone.
func (e *env) wantCounts(traj string, replays, divergences int) {
	e.t.Helper()
	if tr := e.get(traj); tr.Replays != replays || tr.Divergences != divergences {
		e.t.Fatalf("%s: %d replays, %d divergences; want %d, %d", traj, tr.Replays, tr.Divergences, replays, divergences)
	}
	list, err := e.svc.ListTrajectories(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, tr := range list {
		if tr.ID == traj && (tr.Replays != replays || tr.Divergences != divergences) {
			e.t.Fatalf("listed %s: %d replays, %d divergences; want %d, %d", traj, tr.Replays, tr.Divergences, replays, divergences)
		}
	}
}

func (s *suite) testUntagged(t *testing.T) {
	e := s.env(t)
	id := e.create()
	before := e.runs()
	res, err := e.svc.Exec(context.Background(), id, echo("plain"))
	if err != nil || res.Stdout != "plain\n" || res.Replayed {
		t.Fatalf("untagged exec: %+v %v", res, err)
	}
	if before >= 0 && e.runs() != before+1 {
		t.Fatal("untagged exec did not run")
	}
	if list, err := e.svc.ListTrajectories(context.Background()); err != nil || len(list) != 0 {
		t.Fatalf("untagged exec was logged: %+v %v", list, err)
	}
}

func (s *suite) testExecReplay(t *testing.T) {
	e := s.env(t)
	id := e.create()
	res, replayed, err := e.exec("t1", 1, id, echo("one"))
	if err != nil || res.Stdout != "one\n" || res.Replayed || replayed {
		t.Fatalf("live: %+v %v %v", res, replayed, err)
	}
	before := e.runs()
	// The same request with the defaults spelled out: replayed.
	req := echo("one")
	req.TimeoutMs, req.User, req.MaxOutputBytes, req.OutputEncoding = 60000, "root", 1<<20, "utf8"
	res, replayed, err = e.exec("t1", 1, id, req)
	if err != nil || res.Stdout != "one\n" || !res.Replayed || !replayed {
		t.Fatalf("replay: %+v %v %v", res, replayed, err)
	}
	e.noRun(before, "a replay")
	e.wantCounts("t1", 1, 0)
	_, _, err = e.exec("t1", 1, id, echo("two"))
	wantCode(t, err, api.CodeTrajectoryDiverged)
	e.wantCounts("t1", 1, 1)
	if msg := err.Error(); !strings.Contains(msg, "step 1") || strings.Count(msg, "sha256:") != 2 {
		t.Fatalf("diverged message: %s", msg)
	}
	// A non-zero exit is a result like any other.
	if res, _, err = e.exec("t1", 2, id, exit(3)); err != nil || res.ExitCode != 3 {
		t.Fatalf("exit 3: %+v %v", res, err)
	}
	if res, replayed, err = e.exec("t1", 2, id, exit(3)); err != nil || res.ExitCode != 3 || !replayed {
		t.Fatalf("exit 3 replay: %+v %v", res, err)
	}
	e.wantCounts("t1", 2, 1)
	e.restart() // the counts are part of the trajectory's record
	e.wantCounts("t1", 2, 1)
	tr := e.get("t1")
	if tr.SandboxID != id || len(tr.Steps) != 2 || tr.Steps[0].State != api.StepFinished ||
		tr.Steps[0].Status != 200 || !strings.Contains(string(tr.Steps[0].Result), `"one\n"`) {
		t.Fatalf("log: %+v", tr)
	}
}

func (s *suite) testRules(t *testing.T) {
	e := s.env(t)
	id := e.create()
	_, _, err := e.exec("r", 2, id, echo("x"))
	wantCode(t, err, api.CodeInvalidArgument) // a new trajectory starts at 1
	if _, _, err = e.exec("r", 1, id, echo("x")); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.exec("r", 3, id, echo("x"))
	wantCode(t, err, api.CodeInvalidArgument) // a gap
	// A step aimed at another sandbox than its trajectory's.
	other := e.create()
	_, _, err = e.exec("r", 2, other, echo("x"))
	wantCode(t, err, api.CodeConflict)
	// A new trajectory on a sandbox that does not exist: not_found, nothing logged.
	gone := e.create()
	if err := e.inner.Delete(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.exec("r2", 1, gone, echo("x"))
	wantCode(t, err, api.CodeNotFound)
	if _, err := e.svc.GetTrajectory(context.Background(), "r2"); code(err) != api.CodeNotFound {
		t.Fatalf("r2 logged: %v", err)
	}
	// An error that is a result (a missing file) is logged and replayed.
	fs := e.fs(t, "r", 2, id)
	err = fs.Remove(stepCtx("r", 2), "/nope", false)
	wantCode(t, err, api.CodeNotFound)
	ctx, out := step("r", 2)
	err = fs.Remove(ctx, "/nope", false)
	wantCode(t, err, api.CodeNotFound)
	if !out.Replayed {
		t.Fatal("error result not replayed")
	}
}

func stepCtx(traj string, n int) context.Context {
	ctx, _ := step(traj, n)
	return ctx
}

// fs opens the wrapped file system with a step's context.
func (e *env) fs(t *testing.T, traj string, n int, id string) session.FS {
	t.Helper()
	fs, err := e.svc.FS(stepCtx(traj, n), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}

func readAll(t *testing.T, rc io.ReadCloser) string {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func tarOf(t *testing.T, name, content string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(content))
	tw.Close()
	return b.Bytes()
}

func (s *suite) testFiles(t *testing.T) {
	e := s.env(t)
	id := e.create()
	ctx := context.Background()
	fs := e.fs(t, "f", 1, id)
	if _, err := fs.WriteFile(stepCtx("f", 1), "/tmp/f.txt", 0o644, strings.NewReader("hello"), 1<<20); err != nil {
		t.Fatal(err)
	}
	before := e.runs()
	c, out := step("f", 1)
	if _, err := fs.WriteFile(c, "/tmp/./f.txt", 0o644, strings.NewReader("hello"), 1<<20); err != nil || !out.Replayed {
		t.Fatalf("write replay: %v %v", err, out.Replayed)
	}
	e.noRun(before, "a replayed write")
	_, err := fs.WriteFile(stepCtx("f", 1), "/tmp/f.txt", 0o644, strings.NewReader("HELLO"), 1<<20)
	wantCode(t, err, api.CodeTrajectoryDiverged)

	rc, info, err := fs.Open(stepCtx("f", 2), "/tmp/f.txt")
	if err != nil || readAll(t, rc) != "hello" || info.Size != 5 {
		t.Fatalf("read: %+v %v", info, err)
	}
	// The file changes behind the log's back: the replay answers what was read.
	plain, err := e.svc.FS(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.WriteFile(ctx, "/tmp/f.txt", 0o644, strings.NewReader("changed!"), 1<<20); err != nil {
		t.Fatal(err)
	}
	plain.Close()
	c, out = step("f", 2)
	rc, info, err = fs.Open(c, "/tmp/f.txt")
	if err != nil || readAll(t, rc) != "hello" || info.Size != 5 || !out.Replayed {
		t.Fatalf("read replay: %+v %v %v", info, err, out.Replayed)
	}
	if _, err := fs.Mkdir(stepCtx("f", 3), "/tmp/d/e", 0o755, true); err != nil {
		t.Fatal(err)
	}
	if err := fs.ExtractTar(stepCtx("f", 4), "/tmp/d", bytes.NewReader(tarOf(t, "a.txt", "hi"))); err != nil {
		t.Fatal(err)
	}
	c, out = step("f", 4)
	if err := fs.ExtractTar(c, "/tmp/d", bytes.NewReader(tarOf(t, "a.txt", "hi"))); err != nil || !out.Replayed {
		t.Fatalf("archive replay: %v %v", err, out.Replayed)
	}
	err = fs.ExtractTar(stepCtx("f", 4), "/tmp/d", bytes.NewReader(tarOf(t, "a.txt", "HI")))
	wantCode(t, err, api.CodeTrajectoryDiverged)
	if err := fs.Remove(stepCtx("f", 5), "/tmp/d/a.txt", false); err != nil {
		t.Fatal(err)
	}
	tr := e.get("f")
	if len(tr.Steps) != 5 || tr.Steps[1].Op != trajectory.OpReadFile || string(tr.Steps[1].Body) != "hello" || tr.Steps[1].BodySize != 5 ||
		tr.Steps[2].Status != 204 || tr.Steps[0].Status != 200 {
		t.Fatalf("log: %+v", tr.Steps)
	}
}

// streamOut collects a stream's output.
type streamOut struct {
	mu       sync.Mutex
	out, err bytes.Buffer
	pid      int
}

func (o *streamOut) stream(stdin io.Reader) session.Stream {
	return session.Stream{
		Stdin:   stdin,
		Stdout:  writerFunc(func(p []byte) (int, error) { o.mu.Lock(); defer o.mu.Unlock(); return o.out.Write(p) }),
		Stderr:  writerFunc(func(p []byte) (int, error) { o.mu.Lock(); defer o.mu.Unlock(); return o.err.Write(p) }),
		Started: func(pid int) { o.mu.Lock(); defer o.mu.Unlock(); o.pid = pid },
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *suite) testStreamReplay(t *testing.T) {
	e := s.env(t)
	id := e.create()
	req := api.ExecRequest{Cmd: []string{"cat"}, Stdin: "first "}
	var live streamOut
	res, err := e.svc.ExecStream(stepCtx("s", 1), id, req, live.stream(strings.NewReader("second")))
	if err != nil || res.ExitCode != 0 || res.Replayed || live.out.String() != "first second" || live.pid == 0 {
		t.Fatalf("live stream: %+v %v %q pid %d", res, err, live.out.String(), live.pid)
	}
	before := e.runs()
	var again streamOut
	c, out := step("s", 1)
	block := blockingReader{make(chan struct{})} // a replay does not wait for input
	res, err = e.svc.ExecStream(c, id, req, again.stream(block))
	if err != nil || !res.Replayed || !out.Replayed || again.out.String() != "first second" || again.pid != live.pid {
		t.Fatalf("stream replay: %+v %v %q pid %d", res, err, again.out.String(), again.pid)
	}
	e.noRun(before, "a replayed stream")
	// The request's own stdin is part of the fingerprint.
	req.Stdin = "other "
	_, err = e.svc.ExecStream(stepCtx("s", 1), id, req, (&streamOut{}).stream(strings.NewReader("second")))
	wantCode(t, err, api.CodeTrajectoryDiverged)
	// stderr is kept apart.
	warn := api.ExecRequest{Cmd: []string{"sh", "-c", "echo oops >&2"}}
	var w streamOut
	if _, err := e.svc.ExecStream(stepCtx("s", 2), id, warn, w.stream(nil)); err != nil || w.err.String() != "oops\n" {
		t.Fatalf("stderr: %v %q", err, w.err.String())
	}
	var w2 streamOut
	if _, err := e.svc.ExecStream(stepCtx("s", 2), id, warn, w2.stream(nil)); err != nil ||
		w2.err.String() != "oops\n" || w2.out.Len() != 0 {
		t.Fatalf("stderr replay: %v out %q err %q", err, w2.out.String(), w2.err.String())
	}
	tr := e.get("s")
	if !strings.Contains(string(tr.Steps[0].Body), `"exit"`) || !strings.Contains(string(tr.Steps[0].Body), `"started"`) {
		t.Fatalf("stream step shown as %s", tr.Steps[0].Body)
	}
}

type blockingReader struct{ c chan struct{} }

func (b blockingReader) Read([]byte) (int, error) { <-b.c; return 0, io.EOF }

func (s *suite) testProcessReplay(t *testing.T) {
	e := s.env(t)
	id := e.create()
	p, err := e.svc.StartProcess(stepCtx("p", 1), id, echo("bg"))
	if err != nil || p.ID == "" {
		t.Fatalf("start: %+v %v", p, err)
	}
	c, out := step("p", 1)
	p2, err := e.svc.StartProcess(c, id, echo("bg"))
	if err != nil || p2.ID != p.ID || p2.PID != p.PID || !out.Replayed {
		t.Fatalf("replay: %+v %v", p2, err)
	}
	if st := e.get("p").Steps[0]; st.Status != 201 || st.Op != trajectory.OpStartProcess {
		t.Fatalf("logged: %+v", st)
	}
}

// runningStream starts step n as a stream blocked on its stdin and waits until
// it is logged as started; the returned func ends its input and waits for it.
func (e *env) runningStream(traj string, n int, id string) (release func() error) {
	e.t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	svc := e.svc
	go func() {
		_, err := svc.ExecStream(stepCtx(traj, n), id, api.ExecRequest{Cmd: []string{"cat"}}, (&streamOut{}).stream(pr))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr, err := svc.GetTrajectory(context.Background(), traj)
		if err == nil && tr.LastStep == n && tr.Steps[len(tr.Steps)-1].State == api.StepStarted {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("step %d never started: %+v %v", n, tr, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() error {
		pw.Close()
		return <-done
	}
}

func (s *suite) testOutcomeUnknown(t *testing.T) {
	e := s.env(t)
	id := e.create()
	if _, _, err := e.exec("u", 1, id, echo("one")); err != nil {
		t.Fatal(err)
	}
	release := e.runningStream("u", 2, id)
	e.restart() // the server process dies while step 2 runs
	_, err := e.svc.ExecStream(stepCtx("u", 2), id, api.ExecRequest{Cmd: []string{"cat"}}, (&streamOut{}).stream(nil))
	wantCode(t, err, api.CodeOutcomeUnknown)
	if !strings.Contains(err.Error(), "step 3") {
		t.Fatalf("outcome_unknown should name the next step: %v", err)
	}
	// Unknown steps stay unknown; the next step may proceed.
	if res, replayed, err := e.exec("u", 3, id, echo("three")); err != nil || replayed || res.Stdout != "three\n" {
		t.Fatalf("step 3: %+v %v", res, err)
	}
	if res, replayed, err := e.exec("u", 1, id, echo("one")); err != nil || !replayed || res.Stdout != "one\n" {
		t.Fatalf("step 1 after the crash: %+v %v", res, err)
	}
	_ = release() // the old process's step ends; its answer is never logged
	_, err = e.svc.ExecStream(stepCtx("u", 2), id, api.ExecRequest{Cmd: []string{"cat"}}, (&streamOut{}).stream(nil))
	wantCode(t, err, api.CodeOutcomeUnknown)
	tr := e.get("u")
	if len(tr.Steps) != 3 || tr.Steps[1].State != api.StepUnknown || tr.Steps[2].State != api.StepFinished {
		t.Fatalf("log: %+v", tr.Steps)
	}
}

func (s *suite) testRunningNow(t *testing.T) {
	e := s.env(t)
	id := e.create()
	release := e.runningStream("n", 1, id)
	_, err := e.svc.ExecStream(stepCtx("n", 1), id, api.ExecRequest{Cmd: []string{"cat"}}, (&streamOut{}).stream(nil))
	wantCode(t, err, api.CodeConflict)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if st := e.get("n").Steps[0]; st.State != api.StepFinished {
		t.Fatalf("after release: %+v", st)
	}
}

func (s *suite) testClientGone(t *testing.T) {
	e := s.env(t)
	id := e.create()
	ctx, cancel := context.WithCancel(stepCtx("g", 1))
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.ExecStream(ctx, id, api.ExecRequest{Cmd: []string{"cat"}}, (&streamOut{}).stream(pr))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tr, err := e.svc.GetTrajectory(context.Background(), "g"); err == nil && tr.LastStep == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("step never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	pw.CloseWithError(context.Canceled)
	if err := <-done; err == nil {
		t.Fatal("a stream whose caller went away succeeded")
	}
	if st := e.get("g").Steps[0]; st.State != api.StepUnknown {
		t.Fatalf("state %s, want unknown", st.State)
	}
}

func (s *suite) testRetryable(t *testing.T) {
	e := s.env(t)
	id := e.create()
	for _, c := range []api.Code{api.CodeUnavailable, api.CodeInternal, api.CodeResourceExhausted, api.CodeDeadlineExceeded} {
		s.h.Fail(e.inner, "Exec", errdefs.New(c, "injected"))
		_, _, err := e.exec("x", 1, id, echo("one"))
		wantCode(t, err, c)
		if _, err := e.svc.GetTrajectory(context.Background(), "x"); code(err) != api.CodeNotFound {
			t.Fatalf("%s was logged: %v", c, err)
		}
	}
	if res, replayed, err := e.exec("x", 1, id, echo("one")); err != nil || replayed || res.Stdout != "one\n" {
		t.Fatalf("re-issue: %+v %v", res, err)
	}
	// A non-retryable failure is a result.
	s.h.Fail(e.inner, "Exec", errdefs.Invalid("injected bad request"))
	_, _, err := e.exec("x", 2, id, echo("two"))
	wantCode(t, err, api.CodeInvalidArgument)
	_, replayed, err := e.exec("x", 2, id, echo("two"))
	wantCode(t, err, api.CodeInvalidArgument)
	if !replayed || !strings.Contains(err.Error(), "injected bad request") {
		t.Fatalf("error result replay: %v %v", replayed, err)
	}
	// A sandbox that disappears while the step runs is lost, not a result.
	s.h.Fail(e.inner, "Exec", errdefs.NotFound("sandbox %q", id))
	if err := e.inner.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.exec("x", 3, id, echo("three"))
	wantCode(t, err, api.CodeTrajectorySandboxLost)
	if e.get("x").LastStep != 2 {
		t.Fatal("a step lost with its sandbox was logged")
	}
}

func (s *suite) testLostAndRebuild(t *testing.T) {
	e := s.env(t)
	id := e.create()
	ctx := context.Background()
	fs := e.fs(t, "l", 1, id)
	if _, err := fs.WriteFile(stepCtx("l", 1), "/tmp/f.txt", 0o600, strings.NewReader("hello"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Mkdir(stepCtx("l", 2), "/tmp/d", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.exec("l", 3, id, api.ExecRequest{Cmd: []string{"cat"}, Stdin: "in"}); err != nil {
		t.Fatal(err)
	}
	rc, _, err := fs.Open(stepCtx("l", 4), "/tmp/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, rc)
	var so streamOut
	if _, err := e.svc.ExecStream(stepCtx("l", 5), id, echo("streamed"), so.stream(nil)); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.ExecStream(stepCtx("l", 6), id, exit(4), (&streamOut{}).stream(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.RebuildTrajectory(ctx, "l")
	wantCode(t, err, api.CodeConflict) // the sandbox is alive

	if err := e.inner.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Replays still answer; live steps say the sandbox is lost.
	fs2 := e.fs(t, "l", 4, id)
	rc, _, err = fs2.Open(stepCtx("l", 4), "/tmp/f.txt")
	if err != nil || readAll(t, rc) != "hello" {
		t.Fatalf("replay after loss: %v", err)
	}
	_, _, err = e.exec("l", 7, id, echo("x"))
	wantCode(t, err, api.CodeTrajectorySandboxLost)
	if !strings.Contains(err.Error(), "rebuild") {
		t.Fatalf("lost message: %v", err)
	}
	rb, err := e.svc.RebuildTrajectory(ctx, "l")
	if err != nil || rb.SandboxID == "" || rb.SandboxID == id || rb.OldSandbox != id || rb.Reexecuted != 5 || rb.Mismatched != 0 {
		t.Fatalf("rebuild: %+v %v", rb, err)
	}
	t.Cleanup(func() { _ = e.inner.Delete(ctx, rb.SandboxID) })
	for _, st := range rb.Steps {
		if st.Action == "reexecuted" && !st.Matched {
			t.Errorf("step %d did not match: %+v", st.Step, st)
		}
		if st.Step == 4 && st.Action != "skipped" {
			t.Errorf("a read was re-executed: %+v", st)
		}
	}
	sb, err := e.inner.Get(ctx, rb.SandboxID)
	if err != nil || sb.Labels[trajectory.Label] != "l" {
		t.Fatalf("new sandbox: %+v %v", sb, err)
	}
	// The rebuilt sandbox has the state the steps made.
	plain, err := e.inner.FS(ctx, rb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	rc, _, err = plain.Open(ctx, "/tmp/f.txt")
	if err != nil || readAll(t, rc) != "hello" {
		t.Fatalf("rebuilt file: %v", err)
	}
	// Live steps go to the new sandbox; the old one is refused.
	_, _, err = e.exec("l", 7, id, echo("x"))
	wantCode(t, err, api.CodeConflict)
	if res, replayed, err := e.exec("l", 7, rb.SandboxID, echo("after")); err != nil || replayed || res.Stdout != "after\n" {
		t.Fatalf("step after rebuild: %+v %v", res, err)
	}
	tr := e.get("l")
	if tr.SandboxID != rb.SandboxID || tr.Rebuilds != 1 || len(tr.Sandboxes) != 2 || tr.Steps[0].State != api.StepFinished {
		t.Fatalf("after rebuild: %+v", tr)
	}
}

func (s *suite) testInitExited(t *testing.T) {
	e := s.env(t)
	id := e.create()
	if _, _, err := e.exec("k", 1, id, echo("one")); err != nil {
		t.Fatal(err)
	}
	s.h.Kill(t, e.inner, id)
	_, _, err := e.exec("k", 2, id, echo("two"))
	wantCode(t, err, api.CodeTrajectorySandboxLost)
	if _, replayed, err := e.exec("k", 1, id, echo("one")); err != nil || !replayed {
		t.Fatalf("replay: %v", err)
	}
}

func (s *suite) testFnCall(t *testing.T) {
	e := s.env(t)
	want := "7\n"
	req := api.FnCallRequest{Language: "python3", Files: map[string]string{"main.py": "print(7)"},
		Tests: []api.FnCallTest{{Stdin: "", ExpectedOutput: &want}}}
	c, out := step("fc", 1)
	res, err := e.svc.FnCall(c, req)
	if err != nil || res.Verdict != api.VerdictAccepted || out.Replayed {
		t.Fatalf("live: %+v %v", res, err)
	}
	before := e.runs()
	c, out = step("fc", 1)
	res2, err := e.svc.FnCall(c, req)
	if err != nil || res2.Verdict != res.Verdict || len(res2.Tests) != len(res.Tests) || !out.Replayed {
		t.Fatalf("replay: %+v %v", res2, err)
	}
	e.noRun(before, "a replayed FnCall")
	req.Files["main.py"] = "print(8)"
	_, err = e.svc.FnCall(stepCtx("fc", 1), req)
	wantCode(t, err, api.CodeTrajectoryDiverged)
	// A FnCall binds no sandbox: the first sandbox step does.
	id := e.create()
	if _, _, err := e.exec("fc", 2, id, echo("x")); err != nil {
		t.Fatal(err)
	}
	tr := e.get("fc")
	if tr.SandboxID != id || tr.Steps[0].SandboxID != "" || tr.Steps[0].Op != trajectory.OpFnCall {
		t.Fatalf("log: %+v", tr)
	}
	// Rebuild skips it.
	if err := e.inner.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	rb, err := e.svc.RebuildTrajectory(context.Background(), "fc")
	if err != nil || rb.Steps[0].Action != "skipped" || rb.Reexecuted != 1 {
		t.Fatalf("rebuild: %+v %v", rb, err)
	}
	_ = e.inner.Delete(context.Background(), rb.SandboxID)
}

func (s *suite) testHTTP(t *testing.T) {
	e := s.env(t)
	id := e.create()
	var mu sync.Mutex
	hits := 0
	port := s.h.Serve(t, e.inner, id, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		n := hits
		mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-App", "yes")
		w.Header().Set("X-Dsec-Error", "forged")
		w.WriteHeader(201)
		fmt.Fprintf(w, "%s %s %s #%d", r.Method, r.URL.RequestURI(), body, n)
	}))
	do := func(n int, body string) (session.HTTPResponse, string, bool, error) {
		c, out := step("h", n)
		resp, err := e.svc.HTTP(c, id, port, session.HTTPRequest{Method: "POST", Path: "/x/y?q=1",
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: strings.NewReader(body), ContentLength: int64(len(body))})
		if err != nil {
			return resp, "", out.Replayed, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b), out.Replayed, nil
	}
	resp, body, replayed, err := do(1, "ping")
	if err != nil || resp.Status != 201 || body != "POST /x/y?q=1 ping #1" || replayed || resp.Header.Get("X-App") != "yes" ||
		resp.Header.Get("X-Dsec-Error") != "" {
		t.Fatalf("live: %+v %q %v", resp, body, err)
	}
	resp, body, replayed, err = do(1, "ping")
	if err != nil || resp.Status != 201 || body != "POST /x/y?q=1 ping #1" || !replayed || resp.Header.Get("X-App") != "yes" {
		t.Fatalf("replay: %+v %q %v", resp, body, err)
	}
	_, _, _, err = do(1, "pong")
	wantCode(t, err, api.CodeTrajectoryDiverged)
	// Nothing listening: bad_gateway is a result.
	c, _ := step("h", 2)
	_, err = e.svc.HTTP(c, id, 1, session.HTTPRequest{Method: "GET", Path: "/"})
	wantCode(t, err, api.CodeBadGateway)
	c, out := step("h", 2)
	_, err = e.svc.HTTP(c, id, 1, session.HTTPRequest{Method: "GET", Path: "/"})
	wantCode(t, err, api.CodeBadGateway)
	if !out.Replayed {
		t.Fatal("bad_gateway not replayed")
	}
}
