package metrics

import (
	"context"
	"io"
	"net"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Service is the metrics decorator: a session.Service (and FnCaller, Forker,
// Committer, Networker and QoS, passed on to the inner service, which answers
// not_implemented where it lacks them) that counts every operation's errors by
// code, creates and execs with their latency, and FnCall verdicts, and opens
// the session span of creates and execs. The daemon puts it right above the
// node (below the trajectory log), so every front end is counted the same way
// and a replayed step, which runs nothing, is not counted as an exec.
type Service struct {
	inner  session.Service
	m      *Metrics
	tracer trace.Tracer
	traced bool // tracer may record (tracing.Recording)
	// FnCall runs FnCalls (nil: the inner service, if it is a session.FnCaller).
	fnCall session.FnCaller
}

var (
	_ session.Service   = (*Service)(nil)
	_ session.FnCaller  = (*Service)(nil)
	_ session.Forker    = (*Service)(nil)
	_ session.Committer = (*Service)(nil)
	_ session.Networker = (*Service)(nil)
	_ session.QoS       = (*Service)(nil)
)

// Wrap returns inner counted into m, with session spans from tp (nil: none)
// and FnCalls run by fc (nil: inner's own, if it has them).
func (m *Metrics) Wrap(inner session.Service, tp trace.TracerProvider, fc session.FnCaller) *Service {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	if fc == nil {
		fc, _ = inner.(session.FnCaller)
	}
	return &Service{inner: inner, m: m, tracer: tp.Tracer("github.com/dsec-dev/dsec/internal/session"), fnCall: fc,
		traced: tracing.Recording(tp)}
}

// failed counts err (if any) against op and returns it.
func (s *Service) failed(op string, err error) error {
	if err != nil {
		e := errdefs.ToAPI(err)
		s.m.sessionErrors.WithLabelValues(op, codeLabel(e.Code), strconv.FormatBool(e.Infrastructure)).Inc()
	}
	return err
}

// span starts the session span of op.
// Without a recording tracer it makes none (and ctx stays as it is).
func (s *Service) span(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !s.traced {
		return ctx, tracing.NoSpan
	}
	return s.tracer.Start(ctx, "session."+op, trace.WithAttributes(attrs...))
}

func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (s *Service) Info(ctx context.Context) (api.Info, error) {
	v, err := s.inner.Info(ctx)
	return v, s.failed("info", err)
}

func (s *Service) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	t0 := time.Now()
	backend := s.m.backend(req.Backend)
	ctx, span := s.span(ctx, "create", attribute.String("dsec.backend", backend))
	sb, err := s.inner.Create(ctx, req)
	if err == nil && span.IsRecording() {
		span.SetAttributes(attribute.String("dsec.sandbox_id", sb.ID))
	}
	endSpan(span, err)
	res := result(err)
	s.m.creates.WithLabelValues(backend, res).Inc()
	s.m.createSeconds.WithLabelValues(backend, res).Observe(seconds(t0))
	return sb, s.failed("create", err)
}

func (s *Service) Get(ctx context.Context, id string) (api.Sandbox, error) {
	v, err := s.inner.Get(ctx, id)
	return v, s.failed("get", err)
}

func (s *Service) List(ctx context.Context) ([]api.Sandbox, error) {
	v, err := s.inner.List(ctx)
	return v, s.failed("list", err)
}

func (s *Service) Delete(ctx context.Context, id string) error {
	ctx, span := s.span(ctx, "delete", attribute.String("dsec.sandbox_id", id))
	err := s.inner.Delete(ctx, id)
	endSpan(span, err)
	s.m.deletes.WithLabelValues(result(err)).Inc()
	return s.failed("delete", err)
}

func (s *Service) Pause(ctx context.Context, id string) (api.Sandbox, error) {
	v, err := s.inner.Pause(ctx, id)
	return v, s.failed("pause", err)
}

func (s *Service) Resume(ctx context.Context, id string) (api.Sandbox, error) {
	v, err := s.inner.Resume(ctx, id)
	return v, s.failed("resume", err)
}

func (s *Service) Reset(ctx context.Context, id string) (api.Sandbox, error) {
	v, err := s.inner.Reset(ctx, id)
	return v, s.failed("reset", err)
}

// exec counts and traces one exec of mode ("exec", "stream").
func (s *Service) exec(ctx context.Context, mode, id string, run func(context.Context) (api.ExecResult, error)) (api.ExecResult, error) {
	t0 := time.Now()
	ctx, span := s.span(ctx, mode, attribute.String("dsec.sandbox_id", id))
	res, err := run(ctx)
	if err == nil {
		span.SetAttributes(attribute.Int("dsec.exit_code", res.ExitCode))
		s.m.execSeconds.WithLabelValues(mode).Observe(seconds(t0))
	}
	endSpan(span, err)
	s.m.execs.WithLabelValues(mode, result(err)).Inc()
	return res, s.failed(mode, err)
}

func (s *Service) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	return s.exec(ctx, "exec", id, func(ctx context.Context) (api.ExecResult, error) { return s.inner.Exec(ctx, id, req) })
}

func (s *Service) ExecStream(ctx context.Context, id string, req api.ExecRequest, st session.Stream) (api.ExecResult, error) {
	return s.exec(ctx, "stream", id, func(ctx context.Context) (api.ExecResult, error) { return s.inner.ExecStream(ctx, id, req, st) })
}

func (s *Service) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	v, err := s.inner.StartProcess(ctx, id, req)
	return v, s.failed("start_process", err)
}

func (s *Service) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	v, err := s.inner.ListProcesses(ctx, id)
	return v, s.failed("list_processes", err)
}

func (s *Service) GetProcess(ctx context.Context, id, procID string) (api.Process, error) {
	v, err := s.inner.GetProcess(ctx, id, procID)
	return v, s.failed("get_process", err)
}

func (s *Service) WaitProcess(ctx context.Context, id, procID string) (api.Process, error) {
	v, err := s.inner.WaitProcess(ctx, id, procID)
	return v, s.failed("wait_process", err)
}

func (s *Service) KillProcess(ctx context.Context, id, procID string, sig int) error {
	return s.failed("kill_process", s.inner.KillProcess(ctx, id, procID, sig))
}

func (s *Service) ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	v, err := s.inner.ProcessLogs(ctx, id, procID, stream, offset)
	return v, s.failed("process_logs", err)
}

// FS opens the file system; errors of the file operations themselves are the
// front end's to count (they are not session calls).
func (s *Service) FS(ctx context.Context, id string) (session.FS, error) {
	v, err := s.inner.FS(ctx, id)
	return v, s.failed("fs", err)
}

func (s *Service) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	v, err := s.inner.Dial(ctx, id, port)
	return v, s.failed("dial", err)
}

// FnCall implements session.FnCaller: verdicts and latency.
func (s *Service) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	if s.fnCall == nil {
		return api.FnCallResult{}, s.failed("fncall", errdefs.New(api.CodeNotImplemented, "this node does not serve FnCall"))
	}
	t0 := time.Now()
	ctx, span := s.span(ctx, "fncall")
	res, err := s.fnCall.FnCall(ctx, req)
	endSpan(span, err)
	s.m.fnSeconds.Observe(seconds(t0))
	if err == nil {
		s.m.fnVerdicts.WithLabelValues(bounded(res.Verdict, verdicts)).Inc()
	}
	return res, s.failed("fncall", err)
}

// passThrough calls f on the inner service's optional interface T, counting
// its error under op like the other operations; a service without T answers
// not_implemented ("this node " + lacks).
func passThrough[T, R any](s *Service, op, lacks string, f func(T) (R, error)) (R, error) {
	c, ok := s.inner.(T)
	if !ok {
		var zero R
		return zero, s.failed(op, errdefs.New(api.CodeNotImplemented, "this node %s", lacks))
	}
	v, err := f(c)
	return v, s.failed(op, err)
}

func (s *Service) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	return passThrough(s, "fork", "cannot fork sandboxes", func(f session.Forker) (api.ForkResult, error) {
		return f.Fork(ctx, id, req)
	})
}

func (s *Service) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	return passThrough(s, "commit", "cannot commit sandboxes", func(c session.Committer) (api.CommitResult, error) {
		return c.Commit(ctx, id, req)
	})
}

func (s *Service) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error) {
	return passThrough(s, "set_network", "offers no network policy", func(n session.Networker) (api.Sandbox, error) {
		return n.SetNetwork(ctx, id, p)
	})
}

const noQoS = "has no CPU classes or memory reclaim"

func (s *Service) PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error) {
	return passThrough(s, "pause", noQoS, func(q session.QoS) (api.PauseResponse, error) {
		return q.PauseWith(ctx, id, req)
	})
}

func (s *Service) SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error) {
	return passThrough(s, "set_cpu_class", noQoS, func(q session.QoS) (api.Sandbox, error) {
		return q.SetCPUClass(ctx, id, class)
	})
}
