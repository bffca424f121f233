package noderpc_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// traceService records the span context each call arrived with.
type traceService struct {
	fakeService
	got chan trace.SpanContext
}

func (s *traceService) Info(ctx context.Context) (api.Info, error) {
	s.got <- trace.SpanContextFromContext(ctx)
	return api.Info{Node: "fake"}, nil
}

func (s *traceService) ExecStream(ctx context.Context, id string, req api.ExecRequest, st session.Stream) (api.ExecResult, error) {
	s.got <- trace.SpanContextFromContext(ctx)
	return api.ExecResult{}, nil
}

// TestTraceContextCrossesTheWire: a node's handler continues the caller's
// trace (same trace ID, the caller's span as remote parent), on unary calls and
// on streams, so the agent's spans join the API server's trace.
func TestTraceContextCrossesTheWire(t *testing.T) {
	svc := &traceService{got: make(chan trace.SpanContext, 2)}
	n := serve(t, svc, noderpc.HandlerOptions{})
	c := n.client(t, nil)
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(ctxT(t), parent)
	if _, err := c.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecStream(ctx, "sb-0000000000000001.fake", api.ExecRequest{Cmd: []string{"true"}}, session.Stream{}); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"unary Info", "ExecStream"} {
		got := <-svc.got
		if got.TraceID() != parent.TraceID() || got.SpanID() != parent.SpanID() || !got.IsRemote() || !got.IsSampled() {
			t.Errorf("%s: the node saw span context %+v, want the caller's %+v as remote parent", what, got, parent)
		}
	}
}
