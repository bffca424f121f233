package noderpc

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// traceContext carries the caller's span across the wire as a W3C traceparent
// header, so a node's spans (agent, driver) continue the API server's trace
// instead of starting their own. It is the propagator itself, not the process's
// global one: nothing here depends on what a program registered.
var traceContext = propagation.TraceContext{}

// injectTrace puts ctx's span context on an outgoing request's headers.
func injectTrace(ctx context.Context, h http.Header) {
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
}

// extractTrace returns ctx with the span context an incoming request carried.
func extractTrace(ctx context.Context, h http.Header) context.Context {
	return traceContext.Extract(ctx, propagation.HeaderCarrier(h))
}
