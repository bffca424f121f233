package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process/processconnect"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

const testKey = "s3cret-token"

// env is a Handler over a node agent (the mock driver in rooted mode, see
// agenttest.NewRootedNode) behind an httptest server.
type env struct {
	t *testing.T
	n *agenttest.Node
	// steps sees every call on its way to the node.
	steps *stepLog
	h     *e2b.Handler
	srv   *httptest.Server
}

func newEnv(t *testing.T, mod ...func(*e2b.Options)) *env {
	t.Helper()
	n := agenttest.NewRootedNode(t)
	opts := e2b.Options{Authorize: func(k string) bool { return k == testKey }, WatchInterval: 20 * time.Millisecond, Secret: []byte("test")}
	for _, m := range mod {
		m(&opts)
	}
	steps := &stepLog{}
	h := e2b.New(session.Chain(n, steps.interceptor()), opts)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return &env{t: t, n: n, steps: steps, h: h, srv: srv}
}

// call makes a control-plane request with the API key; body is JSON-encoded
// unless it is a string.
func (e *env) call(method, path string, body any, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-KEY", "e2b_"+testKey)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

// created is the answer of POST /v2/sandboxes.
type created struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	ClientID        string `json:"clientID"`
}

func (e *env) create(body map[string]any) created {
	e.t.Helper()
	if body == nil {
		body = map[string]any{"templateID": "base"}
	}
	res, b := e.call("POST", "/v2/sandboxes", body)
	if res.StatusCode != http.StatusCreated {
		e.t.Fatalf("create: %d %s", res.StatusCode, b)
	}
	var c created
	if err := json.Unmarshal(b, &c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// headerTransport adds fixed headers to every request.
type headerTransport struct{ hdr http.Header }

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.hdr {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

// envdClient is an HTTP client that sends the envd headers of sandbox c.
func (e *env) envdClient(c created, extra ...string) *http.Client {
	hdr := http.Header{}
	hdr.Set(e2b.SandboxIDHeader, c.SandboxID)
	hdr.Set(e2b.SandboxPortHeader, "49983")
	hdr.Set(e2b.AccessTokenHeader, c.EnvdAccessToken)
	for i := 0; i+1 < len(extra); i += 2 {
		hdr.Set(extra[i], extra[i+1])
	}
	return &http.Client{Transport: headerTransport{hdr}}
}

func (e *env) process(c created, json bool, extra ...string) processconnect.ProcessClient {
	var opts []connect.ClientOption
	if json {
		opts = append(opts, connect.WithProtoJSON())
	}
	return processconnect.NewProcessClient(e.envdClient(c, extra...), e.srv.URL, opts...)
}

func (e *env) filesystem(c created, json bool) filesystemconnect.FilesystemClient {
	var opts []connect.ClientOption
	if json {
		opts = append(opts, connect.WithProtoJSON())
	}
	return filesystemconnect.NewFilesystemClient(e.envdClient(c), e.srv.URL, opts...)
}

// envdCall makes a raw envd request for sandbox c.
func (e *env) envdCall(c created, method, path, ctype string, body []byte, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := e.envdClientWith(c, hdr...).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func (e *env) envdClientWith(c created, hdr ...string) *http.Client {
	cl := e.envdClient(c)
	tr := cl.Transport.(headerTransport)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			tr.hdr.Del(hdr[i])
		} else {
			tr.hdr.Set(hdr[i], hdr[i+1])
		}
	}
	return cl
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// count is the number of sandboxes the node has.
func (e *env) count() int {
	e.t.Helper()
	all, err := e.n.List(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return len(all)
}

// stepLog is an interceptor that records the step tag of every create, delete
// and exec that carried one ("op TRAJECTORY N") and, with replay set, reports
// such calls as replayed (as the trajectory log does for a step it answers
// from its record); it also keeps the arguments of every chown exec'd. The
// calls go on to the node unchanged.
type stepLog struct {
	mu     sync.Mutex
	seen   []string
	replay bool
	chowns []string
}

func (l *stepLog) interceptor() session.Interceptor {
	return func(next session.Service) session.Service { return stepping{next, l} }
}

func (l *stepLog) note(ctx context.Context, op string) {
	st, out, ok := session.StepFrom(ctx)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, fmt.Sprintf("%s %s %d", op, st.Trajectory, st.N))
	if l.replay {
		out.Replayed = true
	}
}

func (l *stepLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// chownsRun returns the arguments of every chown exec'd so far.
func (l *stepLog) chownsRun() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.chowns)
}

func (l *stepLog) setReplay() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.replay = true
}

type stepping struct {
	session.Service
	l *stepLog
}

func (s stepping) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	s.l.note(ctx, "create")
	return s.Service.Create(ctx, req)
}

func (s stepping) Delete(ctx context.Context, id string) error {
	s.l.note(ctx, "delete")
	return s.Service.Delete(ctx, id)
}

func (s stepping) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	s.l.note(ctx, "exec")
	if len(req.Cmd) > 0 && req.Cmd[0] == "chown" {
		s.l.mu.Lock()
		s.l.chowns = append(s.l.chowns, strings.Join(req.Cmd[1:], " "))
		s.l.mu.Unlock()
	}
	return s.Service.Exec(ctx, id, req)
}

func (s stepping) ExecStream(ctx context.Context, id string, req api.ExecRequest, sio session.Stream) (api.ExecResult, error) {
	s.l.note(ctx, "exec")
	return s.Service.ExecStream(ctx, id, req, sio)
}

func (s stepping) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	s.l.note(ctx, "exec")
	return s.Service.StartProcess(ctx, id, req)
}
