package tracing

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"

	"go.opentelemetry.io/otel/trace"
)

// RequestIDHeader carries a request's ID in and out.
const RequestIDHeader = "X-Request-Id"

type reqIDKey struct{}

// WithRequestID returns ctx carrying request ID id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, reqIDKey{}, id)
}

// RequestID returns the request ID ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(reqIDKey{}).(string)
	return id
}

// maxRequestID bounds a client's request ID; a longer or odd one is replaced.
const maxRequestID = 128

// validRequestID accepts what request IDs are made of (UUIDs, hex, ULIDs,
// dotted or dashed tokens) and nothing that could forge a log field.
func validRequestID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

// newRequestID returns 16 random hex digits (unique, not secret: the
// runtime's generator, no system call).
func newRequestID() string {
	s := strconv.FormatUint(rand.Uint64(), 16)
	return "0000000000000000"[len(s):] + s
}

// LogHandler wraps h so that every record logged with a context carries that
// context's request_id and, when a span is recording, trace_id.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h}
}

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsSampled() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}

func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{l.Handler.WithGroup(name)}
}
