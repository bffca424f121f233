// Package tracing is dsec's OpenTelemetry tracing and request identity: New
// builds the tracer provider every component hands down (server -> session ->
// agent -> driver), exporting spans over OTLP/HTTP when an endpoint is
// configured and making no-op spans (no exporter, near-zero cost) otherwise;
// Middleware gives every HTTP request a request ID (from X-Request-Id or
// generated), a server span and both in the request's context; LogHandler puts
// that request ID and trace ID in every log line written with the context.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The standard variables New falls back to: the OTLP base URL, or the traces
// endpoint's full URL.
const (
	EndpointEnv       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	TracesEndpointEnv = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// Config configures New.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL (http://host:4318; a URL
	// without a path gets /v1/traces). Empty: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// (used as it is), else $OTEL_EXPORTER_OTLP_ENDPOINT; all empty: tracing is
	// off.
	Endpoint string
	// ServiceName names this component in the spans' resource (default "dsec").
	ServiceName string
	// Options are extra span processors or samplers (tests add a recorder).
	Options []sdktrace.TracerProviderOption
}

// Provider is the tracer provider of one component.
type Provider struct {
	trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil when off
	// Propagator reads and writes W3C trace context on HTTP headers.
	Propagator propagation.TextMapPropagator
}

// Off returns a provider that makes no-op spans.
func Off() *Provider {
	return &Provider{TracerProvider: noop.NewTracerProvider(), Propagator: propagation.TraceContext{}}
}

// New returns the provider cfg describes: exporting to an OTLP endpoint, with
// cfg.Options (a test's recorder), or off.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	ep, full := cfg.Endpoint, false
	if ep == "" {
		ep, full = os.Getenv(TracesEndpointEnv), true
	}
	if ep == "" {
		ep, full = os.Getenv(EndpointEnv), false
	}
	if ep == "" && len(cfg.Options) == 0 {
		return Off(), nil
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = "dsec"
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName)))}
	if ep != "" {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("otlp endpoint %q: want an http:// or https:// URL", ep)
		}
		if !full && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
		if err != nil {
			return nil, fmt.Errorf("otlp exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	sdk := sdktrace.NewTracerProvider(append(opts, cfg.Options...)...)
	return &Provider{TracerProvider: sdk, sdk: sdk, Propagator: propagation.TraceContext{}}, nil
}

// Enabled says whether spans are recorded.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// Shutdown flushes buffered spans and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// ForceFlush exports every finished span now (tests).
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.ForceFlush(ctx)
}

// Recording reports whether tp may make spans that record (false for nil, a
// no-op provider and a Provider that is off), so that a hot path can skip
// building a span's name and attributes that nobody would see.
func Recording(tp trace.TracerProvider) bool {
	switch p := tp.(type) {
	case nil:
		return false
	case noop.TracerProvider:
		return false
	case *Provider:
		return p.Enabled()
	}
	return true
}

// NoSpan is a span that records nothing (for a hot path that skips tracing,
// see Recording).
var NoSpan = trace.SpanFromContext(context.Background())
