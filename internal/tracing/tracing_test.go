package tracing_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/internal/tracing/tracingtest"
)

// Every request gets a request ID in its response header and in every log line
// written with its context: the client's when it is plausible, else a new one.
func TestRequestIDs(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(&syncWriter{w: &logs, mu: &mu}, nil)))
	h := tracing.Middleware(tracing.Off(), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.InfoContext(r.Context(), "handled", "path", r.URL.Path)
		log.With("component", "x").InfoContext(r.Context(), "again")
	}))
	generated := regexp.MustCompile(`^[0-9a-f]{16}$`)
	for _, c := range []struct{ sent, want string }{
		{"", ""},
		{"client-id-1.2:3_4", "client-id-1.2:3_4"},
		{"bad id\nforged=1", ""},
		{strings.Repeat("a", 129), ""},
	} {
		logs.Reset()
		req := httptest.NewRequest("GET", "/x", nil)
		if c.sent != "" {
			req.Header.Set(tracing.RequestIDHeader, c.sent)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		id := rec.Header().Get(tracing.RequestIDHeader)
		switch {
		case c.want != "" && id != c.want:
			t.Errorf("sent %q: response ID %q, want it echoed", c.sent, id)
		case c.want == "" && !generated.MatchString(id):
			t.Errorf("sent %q: response ID %q, want a generated one", c.sent, id)
		}
		if n := strings.Count(logs.String(), "request_id="+id+"\n"); n != 2 {
			t.Errorf("sent %q: %d of 2 log lines carry request_id=%s:\n%s", c.sent, n, id, logs.String())
		}
	}
}

type syncWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// With an endpoint, spans reach an OTLP/HTTP collector as protobuf: a real
// HTTP server decodes the export request.
func TestOTLPExport(t *testing.T) {
	col := tracingtest.NewCollector()
	defer col.Close()
	p, err := tracing.New(context.Background(), tracing.Config{Endpoint: col.URL, ServiceName: "dsec-test"})
	if err != nil {
		t.Fatal(err)
	}
	h := tracing.Middleware(p, func(*http.Request) string { return "GET /v1/info" }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/info", nil))
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := col.Spans()
	if len(spans) != 1 || len(col.Bad()) > 0 {
		t.Fatalf("the collector received %d spans; refused %v", len(spans), col.Bad())
	}
	if spans[0].Service != "dsec-test" || spans[0].GetName() != "GET /v1/info" {
		t.Errorf("exported service %q span %q", spans[0].Service, spans[0].GetName())
	}
}

// Off makes no exporter; a bad endpoint is refused.
func TestConfig(t *testing.T) {
	t.Setenv(tracing.EndpointEnv, "")
	t.Setenv(tracing.TracesEndpointEnv, "")
	p, err := tracing.New(context.Background(), tracing.Config{})
	if err != nil || p.Enabled() {
		t.Fatalf("no endpoint: enabled %v, err %v", p.Enabled(), err)
	}
	for _, ep := range []string{"127.0.0.1:4318", "ftp://x", "http://"} {
		if _, err := tracing.New(context.Background(), tracing.Config{Endpoint: ep}); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
}

// Whatever a client sends as X-Request-Id, the ID the server uses is at most
// 128 characters of [A-Za-z0-9._:-] and a plausible one is kept.
func FuzzRequestID(f *testing.F) {
	for _, s := range []string{"", "abc", "a\nb", strings.Repeat("x", 200), "é", "id=1 forged=2"} {
		f.Add(s)
	}
	ok := regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	h := tracing.Middleware(tracing.Off(), nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	f.Fuzz(func(t *testing.T, sent string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header["X-Request-Id"] = []string{sent}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		id := rec.Header().Get(tracing.RequestIDHeader)
		if !ok.MatchString(id) {
			t.Fatalf("sent %q: used %q", sent, id)
		}
		if ok.MatchString(sent) && id != sent {
			t.Fatalf("sent the plausible %q: used %q", sent, id)
		}
	})
}

// BenchmarkMiddlewareOff is what tracing costs a request when it is off: the
// request ID and its context value.
func BenchmarkMiddlewareOff(b *testing.B) {
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	req := httptest.NewRequest("GET", "/v1/info", nil)
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", next}, {"off", tracing.Middleware(tracing.Off(), nil, next)}} {
		b.Run(c.name, func(b *testing.B) {
			w := httptest.NewRecorder()
			for b.Loop() {
				c.h.ServeHTTP(w, req)
			}
		})
	}
}
