package agent

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Observer learns how long the agent's phases take and how much memory it
// reclaims (internal/metrics implements it). Its methods must not block.
type Observer interface {
	// Phase reports one phase of an operation: for a create "admission",
	// "image_mount" and "start"; for an exec "driver_exec". err is its outcome.
	Phase(backend, phase string, d time.Duration, err error)
	// Reclaimed reports bytes moved out of sandboxes' memory, by how:
	// "pause" (pause with reclaim) or "idle" (idle reclaim).
	Reclaimed(how string, bytes int64)
}

// Create and exec phases (Observer.Phase).
const (
	PhaseAdmission  = "admission"
	PhaseImageMount = "image_mount"
	PhaseStart      = "start"
	PhaseDriverExec = "driver_exec"
)

// span starts a span named name, a child of ctx's, for an operation on backend;
// the returned func ends it with the operation's outcome.
func (m *Manager) span(ctx context.Context, name, backend string) (context.Context, func(error)) {
	ctx, span := m.tracer.Start(ctx, name, trace.WithAttributes(attribute.String("dsec.backend", backend)))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// phase starts one phase of an operation: a span named spanName (a child of
// ctx's) and the Observer's timing of phase; the returned func ends both.
func (m *Manager) phase(ctx context.Context, backend, phase, spanName string) (context.Context, func(error)) {
	t0 := time.Now()
	ctx, end := m.span(ctx, spanName, backend)
	return ctx, func(err error) {
		end(err)
		if m.cfg.Observer != nil {
			m.cfg.Observer.Phase(backend, phase, time.Since(t0), err)
		}
	}
}

func (m *Manager) reclaimed(how string, bytes int64) {
	if m.cfg.Observer != nil && bytes > 0 {
		m.cfg.Observer.Reclaimed(how, bytes)
	}
}

func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer("github.com/dsec-dev/dsec/internal/agent")
}

// Capacity is how many sandboxes this node admits (Config.MaxSandboxes).
func (m *Manager) Capacity() int { return m.cfg.MaxSandboxes }
