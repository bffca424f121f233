package noderpc

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/tracing"
)

// traceContext carries the caller's span across the wire as a W3C traceparent
// header, so a node's spans (agent, driver) continue the API server's trace
// instead of starting their own. It is the propagator itself, not the process's
// global one: nothing here depends on what a program registered.
var traceContext = propagation.TraceContext{}

// injectTrace puts ctx's span context on an outgoing request's headers
// (propagation.HeaderCarrier(r.Header), or a headerWriter).
func injectTrace(ctx context.Context, h propagation.TextMapCarrier) {
	traceContext.Inject(ctx, h)
}

// extractTrace returns ctx with the span context an incoming request carried.
func extractTrace(ctx context.Context, h http.Header) context.Context {
	return traceContext.Extract(ctx, propagation.HeaderCarrier(h))
}

// clientTracer is the tracer of a Client's spans (nil without a provider, or
// one that records nothing: then a call makes no span at all).
func clientTracer(tp trace.TracerProvider) trace.Tracer {
	if !tracing.Recording(tp) {
		return nil
	}
	return tp.Tracer("github.com/dsec-dev/dsec/internal/cluster/noderpc")
}

// endNothing ends a span that was not made.
func endNothing(error) {}

// span starts the client span of one call, "noderpc.METHOD" (the node's spans
// are its children); the returned func ends it with the call's outcome.
func (c *Client) span(ctx context.Context, method string) (context.Context, func(error)) {
	if c.tracer == nil {
		return ctx, endNothing
	}
	ctx, sp := c.tracer.Start(ctx, "noderpc."+method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("rpc.system", "connect_rpc"), attribute.String("rpc.service", "dsec.noderpc.v1.Node"),
			attribute.String("rpc.method", method), attribute.String("server.address", c.addr)))
	return ctx, func(err error) {
		if err != nil {
			sp.SetAttributes(attribute.String("dsec.error_code", string(errdefs.ToAPI(err).Code)))
			sp.SetStatus(codes.Error, err.Error())
		}
		sp.End()
	}
}
