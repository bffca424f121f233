// Package tracingtest is an in-process OTLP/HTTP trace collector for tests: a
// real HTTP server that decodes the protobuf export requests an exporter sends
// and keeps their spans. Production code must not import it.
package tracingtest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with its service name.
type Span struct {
	Service string
	*tracev1.Span
}

// TraceID is the span's trace ID in hex.
func (s Span) TraceID() string { return hex.EncodeToString(s.GetTraceId()) }

// Attr is the span's string attribute key ("" if none).
func (s Span) Attr(key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

// Collector receives OTLP/HTTP protobuf exports at /v1/traces.
type Collector struct {
	*httptest.Server
	mu    sync.Mutex
	spans []Span
	bad   []string // requests it could not decode
}

// NewCollector starts a collector; Close it.
func NewCollector() *Collector {
	c := &Collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serve))
	return c
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		c.bad = append(c.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				svc = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, Span{Service: svc, Span: s})
			}
		}
	}
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Bad returns the requests the collector refused (method, path, content type).
func (c *Collector) Bad() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}

// Tree returns the "parent > child" span-name edges of one trace; a span whose
// parent was not received is a child of "(root)".
func Tree(spans []Span, traceID string) map[string]bool {
	byID := map[string]Span{}
	for _, s := range spans {
		if s.TraceID() == traceID {
			byID[hex.EncodeToString(s.GetSpanId())] = s
		}
	}
	edges := map[string]bool{}
	for _, s := range byID {
		parent := "(root)"
		if p, ok := byID[hex.EncodeToString(s.GetParentSpanId())]; ok {
			parent = p.GetName()
		}
		edges[parent+" > "+s.GetName()] = true
	}
	return edges
}
