package e2b_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process/processconnect"
)

const testKey = "s3cret-token"

// env is a Handler over a fakeService behind an httptest server.
type env struct {
	t   *testing.T
	f   *fakeService
	h   *e2b.Handler
	srv *httptest.Server
}

func newEnv(t *testing.T, mod ...func(*e2b.Options)) *env {
	t.Helper()
	f := newFake()
	opts := e2b.Options{Authorize: func(k string) bool { return k == testKey }, WatchInterval: 20 * time.Millisecond, Secret: []byte("test")}
	for _, m := range mod {
		m(&opts)
	}
	h := e2b.New(f, opts)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return &env{t: t, f: f, h: h, srv: srv}
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
