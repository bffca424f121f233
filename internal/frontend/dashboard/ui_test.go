package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/frontend/dashboard"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

const token = "s3cret"

type env struct {
	t    *testing.T
	node *agenttest.Node
	srv  *httptest.Server
}

func newEnv(t *testing.T, shell string) *env {
	t.Helper()
	node := agenttest.NewNode(t)
	h := dashboard.New(dashboard.Options{Token: token, Service: node, Shell: shell, Rates: dashboard.NewRates(0, 0),
		Assets: fstest.MapFS{"index.html": {Data: []byte("<!doctype html><title>dsec</title>")}}})
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, node: node, srv: srv}
}

func (e *env) sandbox(labels map[string]string) api.Sandbox {
	sb, err := e.node.Create(context.Background(), api.CreateSandboxRequest{Labels: labels})
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

// dial opens a terminal and sends the first message.
func (e *env) dial(id string, hello any) *websocket.Conn {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ui/api/terminal/"+id, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.CloseNow() })
	b, _ := json.Marshal(hello)
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		e.t.Fatal(err)
	}
	return c
}

type session struct {
	out    strings.Builder
	events []map[string]any
	// outputFirst: output came before the started event.
	outputFirst bool
	status      websocket.StatusCode
	reason      string
}

// readAll reads until the server closes (or until stop says enough).
func readAll(t *testing.T, c *websocket.Conn, stop func(*session) bool) *session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := &session{}
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("read: %v (output so far %q)", err, s.out.String())
			}
			s.status, s.reason = ce.Code, ce.Reason
			return s
		}
		if typ == websocket.MessageBinary {
			s.outputFirst = s.outputFirst || s.event("started") == nil
			s.out.Write(data)
		} else {
			var ev map[string]any
			if err := json.Unmarshal(data, &ev); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			s.events = append(s.events, ev)
		}
		if stop != nil && stop(s) {
			return s
		}
	}
}

func (s *session) event(typ string) map[string]any {
	for _, ev := range s.events {
		if ev["type"] == typ {
			return ev
		}
	}
	return nil
}

func hello(tok string) map[string]any { return map[string]any{"token": tok, "cols": 100, "rows": 30} }

func TestTerminalRunsCommand(t *testing.T) {
	e := newEnv(t, "echo hello from the sandbox")
	sb := e.sandbox(nil)
	s := readAll(t, e.dial(sb.ID, hello(token)), nil)
	if !strings.Contains(s.out.String(), "hello from the sandbox") {
		t.Errorf("output %q", s.out.String())
	}
	if ev := s.event("exit"); ev == nil || ev["exit_code"] != 0.0 {
		t.Errorf("events %v: want an exit event with code 0", s.events)
	}
	if s.event("started") == nil || s.outputFirst {
		t.Errorf("events %v: want a started event before any output", s.events)
	}
	if s.status != websocket.StatusNormalClosure || !strings.Contains(s.reason, "exited with code 0") {
		t.Errorf("closed %d %q", s.status, s.reason)
	}
}

// TestTerminalInteractive types into cat, resizes, and checks that a bad
// control message is refused without ending the terminal.
func TestTerminalInteractive(t *testing.T) {
	e := newEnv(t, "cat")
	sb := e.sandbox(nil)
	c := e.dial(sb.ID, hello(token))
	ctx := context.Background()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"resize": {"cols": 0, "rows": 5}}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"resize": {"cols": 120, "rows": 40}}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("typed keys\n")); err != nil {
		t.Fatal(err)
	}
	s := readAll(t, c, func(s *session) bool { return strings.Contains(s.out.String(), "typed keys") })
	if ev := s.event("input_error"); ev == nil || ev["code"] != string(api.CodeInvalidArgument) {
		t.Errorf("events %v: want an input_error for the zero size", s.events)
	}
	if s.event("started") == nil || s.outputFirst {
		t.Errorf("events %v: want a started event before any output (the echo of the keys)", s.events)
	}
	testwait.Until(5*time.Second, func() bool { return len(e.node.Resizes()) > 0 })
	if got := e.node.Resizes(); len(got) != 1 || got[0] != (api.TermSize{Cols: 120, Rows: 40}) {
		t.Errorf("resizes %v, want exactly the valid one", got)
	}
}

func TestTerminalRefusals(t *testing.T) {
	e := newEnv(t, "echo should not run")
	sb := e.sandbox(nil)
	gone := e.sandbox(nil)
	if err := e.node.Delete(context.Background(), gone.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		id     string
		hello  any
		status websocket.StatusCode
		msg    string
	}{
		{"wrong token", sb.ID, hello("wrong"), dashboard.CloseUnauthorized, "invalid token"},
		{"no token", sb.ID, map[string]any{"cols": 80, "rows": 24}, dashboard.CloseUnauthorized, "invalid token"},
		{"not json", sb.ID, "hello", dashboard.CloseBadRequest, "first message"},
		{"bad size", sb.ID, map[string]any{"token": token, "cols": 0, "rows": 24}, dashboard.CloseBadRequest, ""},
		{"deleted sandbox", gone.ID, hello(token), dashboard.CloseNotFound, "was deleted"},
		{"unknown sandbox", "sb-0000000000000000.mock-node", hello(token), dashboard.CloseNotFound, "was deleted"},
	} {
		s := readAll(t, e.dial(c.id, c.hello), nil)
		if s.status != c.status {
			t.Errorf("%s: closed with %d %q, want %d", c.name, s.status, s.reason, c.status)
		}
		ev := s.event("error")
		if ev == nil || !strings.Contains(ev["message"].(string), c.msg) {
			t.Errorf("%s: events %v, want an error event saying %q", c.name, s.events, c.msg)
		}
		if strings.Contains(s.out.String(), "should not run") {
			t.Errorf("%s: the command ran: %q", c.name, s.out.String())
		}
	}
}

func (e *env) get(path, tok string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestOverview(t *testing.T) {
	e := newEnv(t, "")
	for i := 0; i < 3; i++ {
		e.sandbox(nil)
	}
	paused := e.sandbox(nil)
	if _, err := e.node.Pause(context.Background(), paused.ID); err != nil {
		t.Fatal(err)
	}
	code, body := e.get("/ui/api/overview", token)
	if code != 200 {
		t.Fatalf("overview: %d %s", code, body)
	}
	var ov dashboard.Overview
	if err := json.Unmarshal(body, &ov); err != nil {
		t.Fatal(err)
	}
	if len(ov.Nodes) != 1 || ov.Nodes[0].Name != "mock-node" || ov.Nodes[0].CPUs < 1 || ov.Nodes[0].MemoryBytes <= 0 {
		t.Errorf("nodes %+v, want the one node with its capacity", ov.Nodes)
	}
	if n := ov.Nodes[0]; n.Sandboxes != 4 || n.Running != 3 || n.CPUAllocated != 3 {
		t.Errorf("node counts %+v, want 4 sandboxes, 3 running with 3 CPUs", n)
	}
	if ov.Sandboxes.Total != 4 || ov.Sandboxes.ByState["running"] != 3 || ov.Sandboxes.ByState["paused"] != 1 ||
		ov.Sandboxes.ByBackend["container"] != 4 {
		t.Errorf("sandboxes %+v", ov.Sandboxes)
	}
	if ov.Rates == nil || len(ov.Rates.Creates) != dashboard.DefaultRateBuckets {
		t.Errorf("rates %+v", ov.Rates)
	}
}

func TestAPINeedsToken(t *testing.T) {
	e := newEnv(t, "")
	for _, tok := range []string{"", "wrong"} {
		code, body := e.get("/ui/api/overview", tok)
		var eb api.ErrorBody
		_ = json.Unmarshal(body, &eb)
		if code != http.StatusUnauthorized || eb.Error == nil || eb.Error.Code != api.CodeUnauthorized {
			t.Errorf("overview with token %q: %d %s, want 401 unauthorized", tok, code, body)
		}
	}
	if code, body := e.get("/ui/api/nope", token); code != http.StatusNotFound {
		t.Errorf("unknown API route: %d %s", code, body)
	}
	// The page itself holds no data and needs no token.
	if code, body := e.get("/ui/", ""); code != 200 || !strings.Contains(string(body), "<title>dsec") {
		t.Errorf("GET /ui/: %d %s", code, body)
	}
}

// TestTerminalSandboxDeletedWhileOpen: the shell is killed (as a delete kills
// it: SIGKILL, no error) a moment before the sandbox's record goes; the
// terminal says the sandbox was deleted, not that the shell exited.
func TestTerminalSandboxDeletedWhileOpen(t *testing.T) {
	node := agenttest.NewNode(t)
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dashboard.New(dashboard.Options{Token: token, Service: node}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e := &env{t: t, node: node, srv: srv}
	sb := e.sandbox(nil)
	c := e.dial(sb.ID, hello(token))
	started := readAll(t, c, func(s *session) bool { return s.event("started") != nil }).event("started")
	// The mock's processes are the host's: the shell dies first...
	if pid, ok := started["pid"].(float64); !ok || pid <= 0 {
		t.Fatalf("started event %v", started)
	} else if err := unix.Kill(int(pid), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond) // ...the record goes a moment later
		_ = node.Delete(context.Background(), sb.ID)
	}()
	s := readAll(t, c, nil)
	if s.status != dashboard.CloseNotFound || !strings.Contains(s.reason, "was deleted") {
		t.Errorf("closed %d %q, want 4404 'was deleted'", s.status, s.reason)
	}
	if s.event("exit") != nil {
		t.Errorf("events %v: a deleted sandbox's terminal reported an exit", s.events)
	}
}
