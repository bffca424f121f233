package tracing

import (
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Middleware serves next with a request ID and a server span: the ID is the
// client's X-Request-Id when it is a plausible one (at most 128 of
// [A-Za-z0-9._:-]), else a new one; it is set on the response before next runs
// and carried in the context (RequestID). The span, named "METHOD ROUTE",
// continues a W3C traceparent the client sent. route maps a request to its
// route pattern (bounded: never the raw path); nil names every span by method.
func Middleware(p *Provider, route func(*http.Request) string, next http.Handler) http.Handler {
	tr := p.Tracer("github.com/dsec-dev/dsec/internal/tracing")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		ctx := WithRequestID(r.Context(), id)
		if !p.Enabled() {
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		ctx = p.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
		rt := ""
		if route != nil {
			rt = route(r)
		}
		name := r.Method // semantic conventions: "METHOD ROUTE"
		switch {
		case strings.HasPrefix(rt, r.Method+" "):
			name = rt // a ServeMux pattern with its method
		case rt != "":
			name += " " + rt
		}
		ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("http.route", rt),
			attribute.String("dsec.request_id", id)))
		defer span.End()
		sw := NewStatusWriter(w)
		next.ServeHTTP(sw, r.WithContext(ctx))
		status := sw.Status()
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", status))
		}
	})
}

// StatusWriter records a response's status for middleware (this package's and
// internal/metrics'); Unwrap keeps Hijack, full duplex and deadlines reachable
// through http.ResponseController.
type StatusWriter struct {
	http.ResponseWriter
	status int
}

// NewStatusWriter wraps w.
func NewStatusWriter(w http.ResponseWriter) *StatusWriter { return &StatusWriter{ResponseWriter: w} }

// Status is the status sent (200 when the handler sent none).
func (w *StatusWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *StatusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
