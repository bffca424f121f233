package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

const token = "tok"

// setup serves a node agent over the mock driver through /v1, with the
// request validation on top as every role composes it.
func setup(t *testing.T) (*Client, *agenttest.Node) {
	t.Helper()
	node := agenttest.NewNode(t)
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(session.Chain(node, session.Validating(nil)), v1.Options{Token: token}).Handler()))
	t.Cleanup(srv.Close)
	return New(srv.URL+"/", token), node
}

func wantCode(t *testing.T, err error, code api.Code, status int) *api.Error {
	t.Helper()
	ae, ok := api.AsError(err)
	if !ok || ae.Code != code || ae.Status != status {
		t.Fatalf("error %v (%#v), want %s/%d", err, ae, code, status)
	}
	if !errors.Is(err, &api.Error{Code: code}) {
		t.Fatal("errors.Is on code")
	}
	return ae
}

func TestFromEnv(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(" filetok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DSEC_ADDR", "")
	t.Setenv("DSEC_TOKEN", "")
	t.Setenv("DSEC_DATA_DIR", dir)
	c, err := FromEnv()
	if err != nil || c.addr != DefaultAddr || c.token != "filetok" {
		t.Fatalf("FromEnv: %+v %v", c, err)
	}
	t.Setenv("DSEC_ADDR", "http://h:1")
	t.Setenv("DSEC_TOKEN", "envtok")
	if c, _ = FromEnv(); c.addr != "http://h:1" || c.token != "envtok" {
		t.Fatalf("FromEnv: %+v", c)
	}
	t.Setenv("DSEC_TOKEN", "")
	t.Setenv("DSEC_DATA_DIR", filepath.Join(dir, "none"))
	if _, err := FromEnv(); err == nil {
		t.Fatal("no token must be an error")
	}
}

func TestSandboxes(t *testing.T) {
	c, node := setup(t)
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.Node != "mock-node" {
		t.Fatalf("info %+v %v", info, err)
	}
	sb, err := c.Create(ctx, api.CreateSandboxRequest{Image: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if creates := node.Creates(); len(creates) != 1 || creates[0].RequestID == "" || sb.RequestID != creates[0].RequestID {
		t.Fatalf("create must carry a generated request id: %+v", creates)
	}
	if got, err := c.Get(ctx, sb.ID); err != nil || got.ID != sb.ID {
		t.Fatalf("get %+v %v", got, err)
	}
	if sb, err = c.Pause(ctx, sb.ID); err != nil || sb.State != api.StatePaused {
		t.Fatalf("pause %+v %v", sb, err)
	}
	// A paused sandbox runs nothing: a conflict.
	_, err = c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}})
	wantCode(t, err, api.CodeConflict, http.StatusConflict)
	if sb, err = c.Resume(ctx, sb.ID); err != nil || sb.State != api.StateRunning {
		t.Fatalf("resume %+v %v", sb, err)
	}
	if _, err = c.Reset(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if list, err := c.List(ctx); err != nil || len(list) != 1 {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(ctx, sb.ID)
	ae := wantCode(t, err, api.CodeNotFound, http.StatusNotFound)
	if ae.Infrastructure || ae.Retryable {
		t.Fatalf("not found flags %+v", ae)
	}
	if doc, err := c.OpenAPI(ctx); err != nil || !bytes.Contains(doc, []byte("/v1/sandboxes")) {
		t.Fatalf("openapi: %v", err)
	}
	bad := New(strings.TrimSuffix(c.addr, "/"), "wrong")
	_, err = bad.List(ctx)
	wantCode(t, err, api.CodeUnauthorized, http.StatusUnauthorized)
}

func TestTransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := New("http://"+addr, token, WithRetry(2))
	c.backoff = func(int) time.Duration { return time.Millisecond }
	_, err = c.List(context.Background())
	ae, ok := api.AsError(err)
	if !ok || ae.Code != api.CodeUnavailable || !ae.Infrastructure || !ae.Retryable {
		t.Fatalf("transport error %v", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("the net error must stay reachable: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.List(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestRetries(t *testing.T) {
	var calls atomic.Int32
	var ids []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes" {
			var req api.CreateSandboxRequest
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &req)
			ids = append(ids, req.RequestID)
		}
		if n%3 != 0 { // fail twice, then succeed
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"busy","infrastructure":true,"retryable":true}}`)
			return
		}
		switch r.URL.Path {
		case "/v1/sandboxes":
			if r.Method == http.MethodPost {
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"id":"sb-1"}`)
				return
			}
			_, _ = io.WriteString(w, `{"sandboxes":[{"id":"sb-1"}]}`)
		default:
			_, _ = io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, token)
	c.backoff = func(int) time.Duration { return time.Millisecond }
	ctx := context.Background()
	if list, err := c.List(ctx); err != nil || len(list) != 1 || calls.Load() != 3 {
		t.Fatalf("list %v %v after %d calls", list, err, calls.Load())
	}
	calls.Store(0)
	if sb, err := c.Create(ctx, api.CreateSandboxRequest{}); err != nil || sb.ID != "sb-1" {
		t.Fatalf("create %v %v", sb, err)
	}
	if len(ids) != 3 || ids[0] == "" || ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("create retries must repeat one request id: %q", ids)
	}
	calls.Store(0)
	_, err := c.Exec(ctx, "sb-1", api.ExecRequest{Cmd: []string{"x"}})
	ae := wantCode(t, err, api.CodeUnavailable, http.StatusServiceUnavailable)
	if !ae.Retryable || calls.Load() != 1 {
		t.Fatalf("exec must not be retried: %d calls", calls.Load())
	}
	calls.Store(0)
	_, err = New(srv.URL, token, WithRetry(0)).Info(ctx)
	if err == nil || calls.Load() != 1 {
		t.Fatalf("WithRetry(0): %v after %d calls", err, calls.Load())
	}
}

func TestExec(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	sb, _ := c.Create(ctx, api.CreateSandboxRequest{})
	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "exit 7"})
	if err != nil || res.ExitCode != 7 {
		t.Fatalf("exec %+v %v", res, err)
	}
	_, err = c.Exec(ctx, sb.ID, api.ExecRequest{})
	wantCode(t, err, api.CodeInvalidArgument, http.StatusBadRequest)

	var out, errb bytes.Buffer
	res, err = c.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat"}}, strings.NewReader("hello\nworld"), &out, &errb)
	if err != nil || res.ExitCode != 0 || out.String() != "hello\nworld" {
		t.Fatalf("stream %+v %v %q", res, err, out.String())
	}
	out.Reset()
	if res, err = c.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat"}}, nil, &out, &errb); err != nil || out.Len() != 0 {
		t.Fatalf("nil stdin %+v %v", res, err)
	}
	if _, err = c.ExecStream(ctx, sb.ID, api.ExecRequest{Shell: "echo oops >&2"}, nil, &out, &errb); err != nil || errb.String() != "oops\n" {
		t.Fatalf("stderr %q %v", errb.String(), err)
	}
	_, err = c.ExecStream(ctx, "nope", api.ExecRequest{Shell: "cat"}, nil, nil, nil)
	wantCode(t, err, api.CodeNotFound, http.StatusNotFound)

	sigs := make(chan string, 1)
	var pid int
	res, err = c.ExecStreamWithOptions(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "60"}}, StreamOptions{
		Signals: sigs,
		OnStart: func(p int) { pid = p; sigs <- "SIGTERM" },
	})
	if err != nil || res.Signal != "SIGTERM" || pid <= 0 {
		t.Fatalf("signal %+v %v pid %d", res, err, pid)
	}
}

// TestExecStreamParallel exercises connection reuse under concurrency.
func TestExecStreamParallel(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	sb, _ := c.Create(ctx, api.CreateSandboxRequest{})
	errs := make(chan error, 32)
	for i := range 32 {
		go func() {
			var out bytes.Buffer
			want := strings.Repeat("x", i*1000)
			_, err := c.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat"}}, strings.NewReader(want), &out, nil)
			if err == nil && out.String() != want {
				err = errors.New("wrong echo")
			}
			errs <- err
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestProcesses(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	sb, _ := c.Create(ctx, api.CreateSandboxRequest{})
	p, err := c.StartProcess(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sleep", "60"}})
	if err != nil || !p.Running {
		t.Fatalf("start %+v %v", p, err)
	}
	if p, err = c.WaitProcess(ctx, sb.ID, p.ID, 10*time.Millisecond); err != nil || !p.Running {
		t.Fatalf("wait %+v %v", p, err)
	}
	if err := c.KillProcess(ctx, sb.ID, p.ID, ""); err != nil {
		t.Fatal(err)
	}
	if p, err = c.WaitProcess(ctx, sb.ID, p.ID, 0); err != nil || p.Running || p.Result.Signal != "SIGKILL" {
		t.Fatalf("after kill %+v %v", p, err)
	}
	if err := c.KillProcess(ctx, sb.ID, p.ID, "SIGBOGUS"); err == nil {
		t.Fatal("bad signal accepted")
	}
	p, _ = c.StartProcess(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "out"}})
	_, _ = c.WaitProcess(ctx, sb.ID, p.ID, 0)
	rc, err := c.ProcessLogs(ctx, sb.ID, p.ID, "stdout", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "ut\n" {
		t.Fatalf("logs %q", b)
	}
	out, err := c.FollowProcess(ctx, sb.ID, p.ID, api.FollowRequest{StdoutOffset: 1, WaitMs: 1000})
	if err != nil || string(out.Stdout) != "ut\n" || len(out.Stderr) != 0 || !out.Ended || out.Process.ID != p.ID {
		t.Fatalf("follow %+v %v", out, err)
	}
	if _, err := c.FollowProcess(ctx, sb.ID, p.ID, api.FollowRequest{MaxBytes: api.MaxFollowBytes + 1}); !errors.Is(err, &api.Error{Code: api.CodeInvalidArgument}) {
		t.Fatalf("follow with too large max_bytes: %v", err)
	}
	if list, err := c.ListProcesses(ctx, sb.ID); err != nil || len(list) != 2 {
		t.Fatalf("list %+v %v", list, err)
	}
	if got, err := c.GetProcess(ctx, sb.ID, p.ID); err != nil || got.ID != p.ID {
		t.Fatalf("get %+v %v", got, err)
	}
}

func TestFiles(t *testing.T) {
	c, node := setup(t)
	ctx := context.Background()
	sb, _ := c.Create(ctx, api.CreateSandboxRequest{})
	info, err := c.WriteFile(ctx, sb.ID, "/dir file.txt", 0o640, strings.NewReader("content"))
	if err != nil || info.Size != 7 || info.Mode != 0o640 {
		t.Fatalf("write %+v %v", info, err)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "/dir file.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "content" {
		t.Fatalf("read %q", b)
	}
	if err := c.Mkdir(ctx, sb.ID, api.MkdirRequest{Path: "/x/y", Parents: true}); err != nil {
		t.Fatal(err)
	}
	// The listing is the sandbox's root on the host (the image's directories
	// too), sorted.
	ents, err := os.ReadDir(node.Root(sb.ID))
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.ListFiles(ctx, sb.ID, "/")
	if err != nil || len(files) != len(ents) || !slices.ContainsFunc(files, func(f api.FileInfo) bool { return f.Name == "dir file.txt" }) {
		t.Fatalf("list %+v %v", files, err)
	}
	for i, f := range files {
		if f.Name != ents[i].Name() {
			t.Fatalf("list %+v, want the entries of %v", files, ents)
		}
	}
	if info, err = c.Stat(ctx, sb.ID, "/x/y"); err != nil || info.Type != "dir" {
		t.Fatalf("stat %+v %v", info, err)
	}
	tr, err := c.DownloadTar(ctx, sb.ID, "/x")
	if err != nil {
		t.Fatal(err)
	}
	tarball, _ := io.ReadAll(tr)
	tr.Close()
	if err := c.Mkdir(ctx, sb.ID, api.MkdirRequest{Path: "/copy"}); err != nil {
		t.Fatal(err)
	}
	if err := c.UploadTar(ctx, sb.ID, "/copy", bytes.NewReader(tarball)); err != nil {
		t.Fatalf("upload tar of %d bytes: %v", len(tarball), err)
	}
	if err := c.Remove(ctx, sb.ID, "/x", true); err != nil {
		t.Fatal(err)
	}
	_, err = c.Stat(ctx, sb.ID, "/x")
	wantCode(t, err, api.CodeNotFound, http.StatusNotFound)
	if _, err := os.Stat(filepath.Join(node.Root(sb.ID), "dir file.txt")); err != nil {
		t.Fatal(err)
	}
}

func TestHTTP(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Header.Get("X-Test"))
		w.WriteHeader(http.StatusAccepted)
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+string(b))
	}))
	defer backend.Close()
	c, _ := setup(t)
	// The mock's sandbox ports are the host's loopback ports.
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	ctx := context.Background()
	sb, _ := c.Create(ctx, api.CreateSandboxRequest{})
	resp, err := c.HTTP(ctx, sb.ID, port, "PUT", "/p?q=1", strings.NewReader("data"), http.Header{"X-Test": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || string(b) != "PUT /p?q=1 data" || resp.Header.Get("X-Seen") != "yes" {
		t.Fatalf("proxy %d %q", resp.StatusCode, b)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing listens on once closed
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	_, err = c.HTTP(ctx, sb.ID, closed.Addr().(*net.TCPAddr).Port, "GET", "/", nil, nil)
	wantCode(t, err, api.CodeBadGateway, http.StatusBadGateway)
}
