package noderpc

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

var unarySecret = []byte("0123456789abcdef")

// infoService answers Info and counts the calls that reached it.
type infoService struct {
	session.Unimplemented
	calls atomic.Int64
}

func (s *infoService) Info(context.Context) (api.Info, error) {
	s.calls.Add(1)
	return api.Info{Node: "n1", Backends: []string{"mock"}}, nil
}

// testNode serves h on a test server and returns it
// with a client of it; both close when the test ends.
func testNode(t *testing.T, h http.Handler) (*httptest.Server, *Client) {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := NewClient(srv.URL, ClientOptions{Secret: unarySecret})
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// postUnary sends one request to the plain unary path of h.
func postUnary(t *testing.T, h http.Handler, method, name, token, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, unaryPrefix+name, strings.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// wireCode is the error code of a plain-path error answer ("" for none).
func wireCode(t *testing.T, w *httptest.ResponseRecorder) api.Code {
	t.Helper()
	if w.Header().Get("Content-Type") != wireErrorType {
		return ""
	}
	var we wireError
	if err := json.Unmarshal(w.Body.Bytes(), &we); err != nil {
		t.Fatalf("error answer %q: %v", w.Body, err)
	}
	return we.Code
}

// The plain unary path refuses what the Connect one refuses, before anything
// runs, and the observer sees every request with a bounded procedure name.
func TestUnaryPathRefusals(t *testing.T) {
	svc := &infoService{}
	obs := &seen{}
	_, h := NewHandler(svc, HandlerOptions{Secret: unarySecret, Observer: obs})
	good := "Bearer " + signToken(unarySecret, time.Now())
	for _, c := range []struct {
		what, method, name, token, body string
		status                          int
		code                            api.Code
	}{
		{"no token", http.MethodPost, "Info", "", "", 401, api.CodeUnauthorized},
		{"wrong secret", http.MethodPost, "Info", "Bearer " + signToken([]byte("another-secret-0123"), time.Now()), "", 401, api.CodeUnauthorized},
		{"old token", http.MethodPost, "Info", "Bearer " + signToken(unarySecret, time.Now().Add(-time.Hour)), "", 401, api.CodeUnauthorized},
		{"GET", http.MethodGet, "Info", good, "", 400, api.CodeInvalidArgument},
		{"unknown method", http.MethodPost, "made-up", good, "", 501, api.CodeNotImplemented},
		{"bad JSON", http.MethodPost, "Get", good, "{", 400, api.CodeInvalidArgument},
	} {
		w := postUnary(t, h, c.method, c.name, c.token, c.body)
		if w.Code != c.status || wireCode(t, w) != c.code {
			t.Errorf("%s: HTTP %d %q, want %d %s", c.what, w.Code, w.Body, c.status, c.code)
		}
	}
	if n := svc.calls.Load(); n != 0 {
		t.Errorf("%d refused requests reached the service", n)
	}
	w := postUnary(t, h, http.MethodPost, "Info", good, "")
	var info api.Info
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &info) != nil || info.Node != "n1" || svc.calls.Load() != 1 {
		t.Fatalf("Info: HTTP %d %q", w.Code, w.Body)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := "Info unauthorized,Info unauthorized,Info unauthorized,Info invalid_argument,other not_implemented,Get invalid_argument,Info ok"
	if got := strings.Join(obs.got, ","); got != want {
		t.Errorf("observed %s\nwant     %s", got, want)
	}
}

// A node of an earlier version (no plain unary path: 404) is called over
// Connect: the first call finds out, later ones go there directly.
func TestOlderNodeGetsConnectCalls(t *testing.T) {
	svc := &infoService{}
	path, h := NewHandler(svc, HandlerOptions{Secret: unarySecret})
	var plain atomic.Int64
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, unaryPrefix) {
			plain.Add(1)
			http.NotFound(w, r) // what an earlier node's Connect handler answers
			return
		}
		h.ServeHTTP(w, r)
	}))
	_, c := testNode(t, mux)
	for i := range 3 {
		if info, err := c.Info(t.Context()); err != nil || info.Node != "n1" {
			t.Fatalf("call %d: %+v, %v", i, info, err)
		}
	}
	if svc.calls.Load() != 3 || plain.Load() != 1 {
		t.Errorf("%d calls ran, %d tried the plain path; want 3 and 1", svc.calls.Load(), plain.Load())
	}
}

// Something that is not a dsec node answering (a proxy's error page) is
// unavailable with infrastructure set, not the proxy's status as a class.
func TestNotANodeIsUnavailable(t *testing.T) {
	_, c := testNode(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream connect error", http.StatusBadGateway)
	}))
	_, err := c.Info(t.Context())
	if !errdefs.Is(err, api.CodeUnavailable) || !errdefs.ToAPI(err).Infrastructure {
		t.Errorf("Info through a proxy's 502: %v (%s)", err, errdefs.CodeOf(err))
	}
}

// Whatever a caller with the cluster token sends, the plain path answers 200
// or a well-formed error, and never panics.
func FuzzUnaryPath(f *testing.F) {
	f.Add(uint8(0), "")
	f.Add(uint8(0), `{"id":"sb-1","create":{"backend":"mock","env":{"A":"b"}}}`)
	f.Add(uint8(1), `{"ids":["a","b"]}`)
	f.Add(uint8(2), "null")
	f.Add(uint8(0), "{")
	svc := &infoService{}
	_, h := NewHandler(svc, HandlerOptions{Secret: unarySecret, Observer: &seen{}})
	// Only methods infoService serves (others would call its nil Service).
	names := []string{"Info", "Ping", "made-up"}
	f.Fuzz(func(t *testing.T, m uint8, body string) {
		name := names[int(m)%len(names)]
		r := httptest.NewRequest(http.MethodPost, unaryPrefix+name, bytes.NewReader([]byte(body)))
		r.Header.Set("Authorization", "Bearer "+signToken(unarySecret, time.Now()))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK && wireCode(t, w) == "" {
			t.Fatalf("HTTP %d without an error body: %q", w.Code, w.Body)
		}
	})
}

// A pooled connection the node closed while it was idle (the node restarted)
// is not used: the next call goes on a fresh one and succeeds.
func TestIdleConnectionClosedByNode(t *testing.T) {
	svc := &infoService{}
	path, h := NewHandler(svc, HandlerOptions{Secret: unarySecret})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv, c := testNode(t, mux)
	for i := range 3 {
		if _, err := c.Info(t.Context()); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		srv.CloseClientConnections() // the node drops every connection
		// Time for the close to reach the idle pooled connection (the case under test); the client exposes no state to wait on.
		time.Sleep(20 * time.Millisecond)
	}
	if svc.calls.Load() != 3 {
		t.Errorf("%d calls ran, want 3", svc.calls.Load())
	}
}

// A call's context ends it at once, also while it waits for the answer; its
// connection is not used again.
func TestUnaryCallEndsWithItsContext(t *testing.T) {
	release := make(chan struct{})
	var n atomic.Int64
	_, c := testNode(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"node":"n1"}`))
	}))
	defer close(release) // before the server closes (cleanups run after)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := c.Info(ctx)
	if d := time.Since(t0); err == nil || d > 5*time.Second {
		t.Fatalf("Info with a 200ms context: %v after %v", err, d)
	}
	if info, err := c.Info(t.Context()); err != nil || info.Node != "n1" {
		t.Fatalf("the next call: %+v, %v", info, err)
	}
}

func TestValidHeader(t *testing.T) {
	for _, c := range []struct {
		k, v string
		ok   bool
	}{
		{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", true},
		{"X-Dsec-Trajectory", "traj-1 with\ttab", true},
		{"X-Dsec-Trajectory", "a\r\nX-Evil: 1", false},
		{"X-Dsec-Trajectory", "a\nb", false},
		{"Bad Name", "v", false},
		{"Bad:Name", "v", false},
		{"", "v", false},
	} {
		if got := validHeader(c.k, c.v); got != c.ok {
			t.Errorf("validHeader(%q, %q) = %v", c.k, c.v, got)
		}
	}
}

// A node behind a path prefix (a base URL with a path) gets its unary calls
// under that prefix, as its streams.
func TestBaseURLWithPath(t *testing.T) {
	svc := &infoService{}
	path, h := NewHandler(svc, HandlerOptions{Secret: unarySecret})
	var plain atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/node1"+path, http.StripPrefix("/node1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, unaryPrefix) {
			plain.Add(1)
		}
		h.ServeHTTP(w, r)
	})))
	srv, _ := testNode(t, mux)
	c := NewClient(srv.URL+"/node1/", ClientOptions{Secret: unarySecret})
	defer c.Close()
	if info, err := c.Info(t.Context()); err != nil || info.Node != "n1" || plain.Load() != 1 {
		t.Fatalf("Info: %+v, %v; %d calls on the plain path, want 1", info, err, plain.Load())
	}
}
