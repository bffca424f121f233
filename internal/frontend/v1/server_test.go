package v1_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

const token = "s3cret"

type env struct {
	t    *testing.T
	node *agenttest.Node
	srv  *httptest.Server
}

func newEnv(t *testing.T, opts v1.Options, wrap ...func(driver.Driver) driver.Driver) *env {
	t.Helper()
	node := agenttest.NewNode(t, wrap...)
	opts.Token = token
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// The request validation sits on top of the service, as in every role.
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(session.Chain(node, session.Validating(nil)), opts).Handler()))
	t.Cleanup(srv.Close)
	return &env{t: t, node: node, srv: srv}
}

// do sends a request with the token and returns the response with its body read.
func (e *env) do(method, path string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, b
}

func (e *env) create() api.Sandbox {
	e.t.Helper()
	resp, b := e.do("POST", "/v1/sandboxes", strings.NewReader(`{}`))
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var sb api.Sandbox
	mustJSON(e.t, b, &sb)
	return sb
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
}

// wantError checks status, code and the error body's shape.
func wantError(t *testing.T, resp *http.Response, body []byte, status int, code api.Code) *api.Error {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	if got := api.Code(resp.Header.Get(v1.ErrorHeader)); got != code {
		t.Fatalf("%s = %q, want %q", v1.ErrorHeader, got, code)
	}
	var raw map[string]map[string]any
	mustJSON(t, body, &raw)
	e := raw["error"]
	for _, k := range []string{"code", "message", "infrastructure", "retryable"} {
		if _, ok := e[k]; !ok {
			t.Fatalf("error body %s lacks %q", body, k)
		}
	}
	var eb api.ErrorBody
	mustJSON(t, body, &eb)
	if eb.Error.Code != code {
		t.Fatalf("code = %q, want %q (%s)", eb.Error.Code, code, body)
	}
	return eb.Error
}

func TestAuth(t *testing.T) {
	e := newEnv(t, v1.Options{})
	resp, err := http.Get(e.srv.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"ok":true}` {
		t.Fatalf("health: %d %s", resp.StatusCode, b)
	}
	for name, hdr := range map[string]string{"none": "", "wrong": "Bearer nope", "basic": "Basic " + token, "prefix": "Bearer " + token + "x"} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.srv.URL+"/v1/info", nil)
			if hdr != "" {
				req.Header.Set("Authorization", hdr)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ae := wantError(t, resp, b, http.StatusUnauthorized, api.CodeUnauthorized)
			if ae.Infrastructure || ae.Retryable {
				t.Fatalf("unauthorized flags: %+v", ae)
			}
		})
	}
	resp, b = e.do("GET", "/v1/info", nil)
	var info api.Info
	mustJSON(t, b, &info)
	if resp.StatusCode != 200 || info.Node != "mock-node" {
		t.Fatalf("info: %d %s", resp.StatusCode, b)
	}
}

func TestEmptyTokenRejectsAll(t *testing.T) {
	srv := httptest.NewServer(openapitest.Wrap(t, v1.New(agenttest.NewNode(t), v1.Options{}).Handler()))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/info", nil)
	req.Header.Set("Authorization", "Bearer ")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestNotFoundAndMethod(t *testing.T) {
	e := newEnv(t, v1.Options{})
	resp, b := e.do("GET", "/v1/sandboxes/nope", nil)
	ae := wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
	if ae.Infrastructure || !strings.Contains(ae.Message, "nope") {
		t.Fatalf("not found: %+v", ae)
	}
	resp, b = e.do("POST", "/v1/sandboxes/nope/exec", strings.NewReader(`{"cmd":["echo"]}`))
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
	resp, b = e.do("GET", "/v1/nothing/here", nil)
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
	resp, b = e.do("PATCH", "/v1/sandboxes", nil)
	wantError(t, resp, b, http.StatusMethodNotAllowed, api.CodeInvalidArgument)
	if allow := resp.Header.Get("Allow"); !strings.Contains(allow, "POST") {
		t.Fatalf("Allow = %q", allow)
	}
}

func TestBadBodies(t *testing.T) {
	e := newEnv(t, v1.Options{MaxBodyBytes: 256})
	sb := e.create()
	exec := "/v1/sandboxes/" + sb.ID + "/exec"
	for _, tc := range []struct{ name, body, want string }{
		{"malformed", `{"cmd":`, "unexpected end"},
		{"syntax", `{"cmd" ["x"]}`, "malformed JSON"},
		{"unknown field", `{"cmd":["x"],"bogus":1}`, `unknown field "bogus"`},
		{"trailing", `{"cmd":["x"]} {}`, "after the JSON object"},
		{"wrong type", `{"cmd":"x"}`, `field "cmd"`},
		{"empty", ``, "empty"},
		{"neither", `{}`, "exactly one of cmd and shell"},
		{"both", `{"cmd":["x"],"shell":"x"}`, "both"},
		{"negative", `{"cmd":["x"],"timeout_ms":-1}`, "timeout_ms is negative"},
		{"encoding", `{"cmd":["x"],"output_encoding":"hex"}`, "output_encoding"},
		{"env", `{"cmd":["x"],"env":{"A=B":"c"}}`, "invalid variable name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do("POST", exec, strings.NewReader(tc.body))
			ae := wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
			if !strings.Contains(ae.Message, tc.want) {
				t.Fatalf("message %q lacks %q", ae.Message, tc.want)
			}
		})
	}
	big := `{"shell":"` + strings.Repeat("x", 300) + `"}`
	resp, b := e.do("POST", exec, strings.NewReader(big))
	wantError(t, resp, b, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
	// Without a Content-Length the limit still applies while reading.
	resp, b = e.do("POST", exec, io.MultiReader(strings.NewReader(big)))
	wantError(t, resp, b, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
	resp, b = e.do("POST", "/v1/sandboxes", strings.NewReader(`{"memory_bytes":-5}`))
	wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
	resp, b = e.do("POST", "/v1/sandboxes/"+sb.ID+"/processes/p-1/kill", strings.NewReader(`{"signal":"SIGNOPE"}`))
	wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
	resp, b = e.do("GET", "/v1/sandboxes/"+sb.ID+"/files/stat", nil)
	wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
}

func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t, v1.Options{})
	resp, b := e.do("POST", "/v1/sandboxes", strings.NewReader(`{"image":"tiny"}`), "Idempotency-Key", "key-1")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var first, again api.Sandbox
	mustJSON(t, b, &first)
	resp, b = e.do("POST", "/v1/sandboxes", strings.NewReader(`{"image":"tiny"}`), "Idempotency-Key", "key-1")
	mustJSON(t, b, &again)
	if again.ID != first.ID || first.RequestID != "key-1" {
		t.Fatalf("idempotency: %+v vs %+v", first, again)
	}
	if got := e.node.Creates(); len(got) != 2 || got[0].RequestID != "key-1" || got[0].Image != "tiny" {
		t.Fatalf("node saw %+v", got)
	}
	resp, b = e.do("POST", "/v1/sandboxes", strings.NewReader(`{"request_id":"a"}`), "Idempotency-Key", "b")
	wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)

	// A pause without memory on a backend without it (the mock): 501,
	// naming the backend, and the sandbox runs on.
	resp, b = e.do("POST", "/v1/sandboxes/"+first.ID+"/pause", strings.NewReader(`{"memory":false}`))
	wantError(t, resp, b, http.StatusNotImplemented, api.CodeNotImplemented)
	if !strings.Contains(string(b), "pause without memory") {
		t.Fatalf("pause without memory: %s does not say what the backend cannot do", b)
	}
	if sb, err := e.node.Get(context.Background(), first.ID); err != nil || sb.State != api.StateRunning {
		t.Fatalf("after a refused pause without memory: %+v %v", sb, err)
	}
	resp, b = e.do("POST", "/v1/sandboxes/"+first.ID+"/pause", nil)
	var sb api.Sandbox
	mustJSON(t, b, &sb)
	if resp.StatusCode != 200 || sb.State != api.StatePaused {
		t.Fatalf("pause: %d %s", resp.StatusCode, b)
	}
	// A paused sandbox runs nothing: the node's conflict is a 409.
	resp, b = e.do("POST", "/v1/sandboxes/"+first.ID+"/exec", strings.NewReader(`{"cmd":["true"]}`))
	wantError(t, resp, b, http.StatusConflict, api.CodeConflict)
	resp, _ = e.do("POST", "/v1/sandboxes/"+first.ID+"/resume", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	resp, b = e.do("GET", "/v1/sandboxes", nil)
	var list api.ListSandboxesResponse
	mustJSON(t, b, &list)
	if len(list.Sandboxes) != 1 {
		t.Fatalf("list: %s", b)
	}
	resp, _ = e.do("DELETE", "/v1/sandboxes/"+first.ID, nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	_, b = e.do("GET", "/v1/sandboxes", nil)
	if strings.TrimSpace(string(b)) != `{"sandboxes":[]}` {
		t.Fatalf("empty list must be an array: %s", b)
	}
}

func TestExecPassthrough(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	resp, b := e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(`{"cmd":["sh","-c","exit 3"]}`))
	var res api.ExecResult
	mustJSON(t, b, &res)
	if resp.StatusCode != 200 || res.ExitCode != 3 {
		t.Fatalf("exec: %d %s", resp.StatusCode, b)
	}
	_, b = e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(`{"shell":"echo hi there","stdin":"x"}`))
	mustJSON(t, b, &res)
	if res.Stdout != "hi there\n" || res.ExitCode != 0 {
		t.Fatalf("exec: %s", b)
	}
}

// streamConn drives one full-duplex exec/stream exchange.
type streamConn struct {
	t    *testing.T
	in   *io.PipeWriter
	enc  *json.Encoder
	dec  *json.Decoder
	resp *http.Response
}

func (e *env) stream(req api.ExecRequest) *streamConn {
	e.t.Helper()
	pr, pw := io.Pipe()
	hreq, _ := http.NewRequest("POST", e.srv.URL+"/v1/sandboxes/"+e.create().ID+"/exec/stream", pr)
	hreq.Header.Set("Authorization", "Bearer "+token)
	sc := &streamConn{t: e.t, in: pw, enc: json.NewEncoder(pw)}
	go func() { _ = sc.enc.Encode(req) }()
	resp, err := e.srv.Client().Do(hreq)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close(); pw.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	sc.resp, sc.dec = resp, json.NewDecoder(bufio.NewReader(resp.Body))
	return sc
}

func (sc *streamConn) send(in api.StreamInput) {
	sc.t.Helper()
	if err := sc.enc.Encode(in); err != nil {
		sc.t.Fatal(err)
	}
}

func (sc *streamConn) next() api.StreamEvent {
	sc.t.Helper()
	var ev api.StreamEvent
	if err := sc.dec.Decode(&ev); err != nil {
		sc.t.Fatal(err)
	}
	return ev
}

func TestExecStreamFullDuplex(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sc := e.stream(api.ExecRequest{Cmd: []string{"cat"}, Stdin: "pre:"})
	if ev := sc.next(); ev.Type != "started" || ev.PID <= 0 {
		t.Fatalf("first event %+v", ev)
	}
	// The response is read while the request body is still open: full duplex.
	var got bytes.Buffer
	sc.send(api.StreamInput{Stdin: []byte("hello\n")})
	for got.String() != "pre:hello\n" {
		ev := sc.next()
		if ev.Type != "stdout" {
			t.Fatalf("event %+v, have %q", ev, got.String())
		}
		got.Write(ev.Data)
	}
	sc.send(api.StreamInput{Stdin: []byte("more"), EOF: true})
	for {
		ev := sc.next()
		if ev.Type == "stdout" {
			got.Write(ev.Data)
			continue
		}
		if ev.Type != "exit" || ev.Result == nil || ev.Result.ExitCode != 0 {
			t.Fatalf("final event %+v", ev)
		}
		break
	}
	if got.String() != "pre:hello\nmore" {
		t.Fatalf("echoed %q", got.String())
	}
	sc.in.Close()
}

func TestExecStreamSignal(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sc := e.stream(api.ExecRequest{Cmd: []string{"sleep", "60"}})
	if ev := sc.next(); ev.Type != "started" {
		t.Fatalf("first event %+v", ev)
	}
	sc.send(api.StreamInput{Signal: "TERM"})
	ev := sc.next()
	if ev.Type != "exit" || ev.Result.Signal != "SIGTERM" || ev.Result.ExitCode != -1 {
		t.Fatalf("exit event %+v", ev)
	}
	if sigs := e.node.Signals(); len(sigs) != 1 || sigs[0] != 15 {
		t.Fatalf("signals %v", sigs)
	}
	// The client never closes its body: the server must still finish.
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(sc.resp.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not end")
	}
}

func TestExecStreamErrors(t *testing.T) {
	e := newEnv(t, v1.Options{})
	resp, b := e.do("POST", "/v1/sandboxes/nope/exec/stream", strings.NewReader(`{"cmd":["cat"]}`+"\n"))
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
	sb := e.create()
	resp, b = e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec/stream", strings.NewReader(`{"cmd":["cat"],"x":1}`+"\n"))
	wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
	// A refused input line after the start is an input_error event; the process
	// still gets its stdin and exits.
	resp, b = e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec/stream",
		strings.NewReader(`{"cmd":["cat"]}`+"\n"+`{"signal":"NOPE"}`+"\n"+`{"stdin":"aGk="}`+"\n"))
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"type":"input_error"`) || !strings.Contains(string(b), `"type":"exit"`) ||
		!strings.Contains(string(b), `"data":"aGk="`) {
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	// An undecodable input line is an error event; the process still exits.
	resp, b = e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec/stream",
		strings.NewReader(`{"cmd":["cat"]}`+"\n"+`{"signal":`+"\n"))
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"type":"error"`) || !strings.Contains(string(b), `"type":"exit"`) {
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
}

func TestProcesses(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	base := "/v1/sandboxes/" + sb.ID + "/processes"
	resp, b := e.do("POST", base, strings.NewReader(`{"cmd":["sleep","60"]}`))
	var p api.Process
	mustJSON(t, b, &p)
	if resp.StatusCode != http.StatusCreated || !p.Running {
		t.Fatalf("start: %d %s", resp.StatusCode, b)
	}
	_, b = e.do("POST", base+"/"+p.ID+"/wait?timeout_ms=20", nil)
	mustJSON(t, b, &p)
	if !p.Running {
		t.Fatalf("wait with timeout: %s", b)
	}
	resp, b = e.do("POST", base+"/"+p.ID+"/wait?timeout_ms=-1", nil)
	wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
	resp, _ = e.do("POST", base+"/"+p.ID+"/kill", strings.NewReader(`{"signal":"SIGINT"}`))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("kill: %d", resp.StatusCode)
	}
	_, b = e.do("POST", base+"/"+p.ID+"/wait", nil)
	mustJSON(t, b, &p)
	if p.Running || p.Result == nil || p.Result.Signal != "SIGINT" {
		t.Fatalf("after kill: %s", b)
	}
	_, b = e.do("POST", base, strings.NewReader(`{"cmd":["echo","logged"]}`))
	mustJSON(t, b, &p)
	e.do("POST", base+"/"+p.ID+"/wait", nil)
	resp, b = e.do("GET", base+"/"+p.ID+"/logs?stream=stdout&offset=2", nil)
	if resp.StatusCode != 200 || string(b) != "gged\n" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("logs: %d %q", resp.StatusCode, b)
	}
	resp, b = e.do("GET", base+"/"+p.ID+"/logs?stream=both", nil)
	wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
	_, b = e.do("GET", base, nil)
	var list api.ListProcessesResponse
	mustJSON(t, b, &list)
	if len(list.Processes) != 2 {
		t.Fatalf("list: %s", b)
	}
	resp, b = e.do("GET", base+"/nope", nil)
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
}

func TestProxy(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(v1.ErrorHeader, "forged")
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprintf(w, "%s %s q=%s auth=%q host=%s", r.Method, r.URL.EscapedPath(), r.URL.RawQuery,
			r.Header.Get("Authorization"), r.Host)
	}))
	defer backend.Close()
	e := newEnv(t, v1.Options{})
	// The mock's sandbox ports are the host's loopback ports.
	port := backendPort(t, backend)
	sb := e.create()
	base := "/v1/sandboxes/" + sb.ID + "/http/"
	resp, b := e.do("POST", base+port+"/a//b%2Fc?x=1&y=2", strings.NewReader("body"))
	want := `POST /a//b%2Fc q=x=1&y=2 auth="" host=localhost:` + port
	if resp.StatusCode != http.StatusTeapot || string(b) != want {
		t.Fatalf("proxy: %d %q, want %q", resp.StatusCode, b, want)
	}
	if resp.Header.Get(v1.ErrorHeader) != "" {
		t.Fatal("the application must not forge dsec errors")
	}
	resp, b = e.do("GET", base+port, nil)
	if !strings.HasPrefix(string(b), "GET / ") {
		t.Fatalf("proxy root: %d %q", resp.StatusCode, b)
	}
	resp, b = e.do("GET", base+closedPort(t)+"/", nil)
	ae := wantError(t, resp, b, http.StatusBadGateway, api.CodeBadGateway)
	if ae.Infrastructure {
		t.Fatal("bad gateway is not infrastructure")
	}
	for _, port := range []string{"0", "65536", "http"} {
		resp, b = e.do("GET", base+port+"/", nil)
		wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
	}
	resp, b = e.do("GET", "/v1/sandboxes/nope/http/8080/", nil)
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
}

func TestUploadLimit(t *testing.T) {
	e := newEnv(t, v1.Options{MaxUploadBytes: 10})
	sb := e.create()
	resp, b := e.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/f", strings.NewReader("01234567890"))
	wantError(t, resp, b, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
	resp, b = e.do("PUT", "/v1/sandboxes/"+sb.ID+"/files/archive?path=/", strings.NewReader("01234567890"))
	wantError(t, resp, b, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
	resp, b = e.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/f&mode=999", strings.NewReader("x"))
	wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
}

func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t, v1.Options{})
	resp, b := e.do("GET", "/v1/openapi.yaml", nil)
	if resp.StatusCode != 200 || !bytes.HasPrefix(b, []byte("openapi: 3.0")) ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/yaml") {
		t.Fatalf("openapi: %d %.40q", resp.StatusCode, b)
	}
}

type panicNode struct{ session.Service }

func (panicNode) Info(context.Context) (api.Info, error) { panic("boom") }

func TestPanicRecovered(t *testing.T) {
	var logs bytes.Buffer
	h := v1.New(panicNode{agenttest.NewNode(t)}, v1.Options{Token: token,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}).Handler()
	srv := httptest.NewServer(openapitest.Wrap(t, h))
	defer srv.Close()
	e := &env{t: t, srv: srv}
	resp, b := e.do("GET", "/v1/info", nil)
	wantError(t, resp, b, http.StatusInternalServerError, api.CodeInternal)
	if !strings.Contains(logs.String(), "panic in handler") || !strings.Contains(logs.String(), "status=500") {
		t.Fatalf("logs: %s", logs.String())
	}
}

// PUT .../deadline moves a sandbox's deadline; bad input is invalid_argument.
func TestSetDeadline(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	resp, b := e.do("PUT", "/v1/sandboxes/"+sb.ID+"/deadline", strings.NewReader(`{"timeout_seconds":120,"on_expiry":"pause"}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("set deadline: %d %s", resp.StatusCode, b)
	}
	var got api.Sandbox
	mustJSON(t, b, &got)
	if got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 100*time.Second || got.OnExpiry != api.ExpiryPause {
		t.Fatalf("after set: %s", b)
	}
	for _, body := range []string{`{"timeout_seconds":-1}`, `{"timeout_seconds":99999999999}`, `{"timeout_seconds":5,"on_expiry":"boom"}`} {
		resp, b := e.do("PUT", "/v1/sandboxes/"+sb.ID+"/deadline", strings.NewReader(body))
		wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
	}
	resp, b = e.do("PUT", "/v1/sandboxes/sb-nope/deadline", strings.NewReader(`{"timeout_seconds":5}`))
	wantError(t, resp, b, http.StatusNotFound, api.CodeNotFound)
}

// backendPort is the loopback port srv listens on.
func backendPort(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// closedPort is a loopback port nothing listens on (one the test listened on
// and closed).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}
