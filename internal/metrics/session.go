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

// Service is the metrics decorator, a session.Service interceptor: it counts
// every operation's errors by code, creates and execs with their latency, and
// FnCall verdicts, and opens the session span of creates and execs. Every
// role puts it right above its base service (below the trajectory log, see
// session.Chain), so every front end is counted the same way and a replayed
// step, which runs nothing, is not counted as an exec. The methods it does
// not count pass through to the embedded inner Service.
type Service struct {
	session.Service // the inner service
	m               *Metrics
	tracer          trace.Tracer
	traced          bool // tracer may record (tracing.Recording)
}

var _ session.Service = (*Service)(nil)

// Wrap returns inner counted into m, with session spans from tp (nil: none).
func (m *Metrics) Wrap(inner session.Service, tp trace.TracerProvider) *Service {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Service{Service: inner, m: m, tracer: tp.Tracer("github.com/dsec-dev/dsec/internal/session"),
		traced: tracing.Recording(tp)}
}

// Interceptor is Wrap as a session.Interceptor (for session.Chain).
func (m *Metrics) Interceptor(tp trace.TracerProvider) session.Interceptor {
	return func(next session.Service) session.Service { return m.Wrap(next, tp) }
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
	v, err := s.Service.Info(ctx)
	return v, s.failed("info", err)
}

func (s *Service) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	t0 := time.Now()
	backend := s.m.backend(req.Backend)
	ctx, span := s.span(ctx, "create", attribute.String("dsec.backend", backend))
	sb, err := s.Service.Create(ctx, req)
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
	v, err := s.Service.Get(ctx, id)
	return v, s.failed("get", err)
}

func (s *Service) List(ctx context.Context) ([]api.Sandbox, error) {
	v, err := s.Service.List(ctx)
	return v, s.failed("list", err)
}

func (s *Service) Delete(ctx context.Context, id string) error {
	ctx, span := s.span(ctx, "delete", attribute.String("dsec.sandbox_id", id))
	err := s.Service.Delete(ctx, id)
	endSpan(span, err)
	s.m.deletes.WithLabelValues(result(err)).Inc()
	return s.failed("delete", err)
}

func (s *Service) Pause(ctx context.Context, id string) (api.Sandbox, error) {
	v, err := s.Service.Pause(ctx, id)
	return v, s.failed("pause", err)
}

func (s *Service) Resume(ctx context.Context, id string) (api.Sandbox, error) {
	v, err := s.Service.Resume(ctx, id)
	return v, s.failed("resume", err)
}

func (s *Service) Reset(ctx context.Context, id string) (api.Sandbox, error) {
	v, err := s.Service.Reset(ctx, id)
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
	return s.exec(ctx, "exec", id, func(ctx context.Context) (api.ExecResult, error) { return s.Service.Exec(ctx, id, req) })
}

func (s *Service) ExecStream(ctx context.Context, id string, req api.ExecRequest, st session.Stream) (api.ExecResult, error) {
	return s.exec(ctx, "stream", id, func(ctx context.Context) (api.ExecResult, error) { return s.Service.ExecStream(ctx, id, req, st) })
}

func (s *Service) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	v, err := s.Service.StartProcess(ctx, id, req)
	return v, s.failed("start_process", err)
}

func (s *Service) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	v, err := s.Service.ListProcesses(ctx, id)
	return v, s.failed("list_processes", err)
}

func (s *Service) GetProcess(ctx context.Context, id, procID string) (api.Process, error) {
	v, err := s.Service.GetProcess(ctx, id, procID)
	return v, s.failed("get_process", err)
}

func (s *Service) WaitProcess(ctx context.Context, id, procID string) (api.Process, error) {
	v, err := s.Service.WaitProcess(ctx, id, procID)
	return v, s.failed("wait_process", err)
}

func (s *Service) KillProcess(ctx context.Context, id, procID string, sig int) error {
	return s.failed("kill_process", s.Service.KillProcess(ctx, id, procID, sig))
}

func (s *Service) ProcessLogs(ctx context.Context, id, procID, stream string, offset int64) (io.ReadCloser, error) {
	v, err := s.Service.ProcessLogs(ctx, id, procID, stream, offset)
	return v, s.failed("process_logs", err)
}

func (s *Service) FollowProcess(ctx context.Context, id, procID string, req api.FollowRequest) (api.ProcessOutput, error) {
	v, err := s.Service.FollowProcess(ctx, id, procID, req)
	return v, s.failed("follow_process", err)
}

// FS opens the file system; errors of the file operations themselves are the
// front end's to count (they are not session calls).
func (s *Service) FS(ctx context.Context, id string) (session.FS, error) {
	v, err := s.Service.FS(ctx, id)
	return v, s.failed("fs", err)
}

func (s *Service) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	v, err := s.Service.Dial(ctx, id, port)
	return v, s.failed("dial", err)
}

// FnCall: verdicts and latency.
func (s *Service) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	t0 := time.Now()
	ctx, span := s.span(ctx, "fncall")
	res, err := s.Service.FnCall(ctx, req)
	endSpan(span, err)
	s.m.fnSeconds.Observe(seconds(t0))
	if err == nil {
		s.m.fnVerdicts.WithLabelValues(bounded(res.Verdict, verdicts)).Inc()
	}
	return res, s.failed("fncall", err)
}

func (s *Service) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	v, err := s.Service.Fork(ctx, id, req)
	return v, s.failed("fork", err)
}

func (s *Service) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	v, err := s.Service.Commit(ctx, id, req)
	return v, s.failed("commit", err)
}

func (s *Service) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error) {
	v, err := s.Service.SetNetwork(ctx, id, p)
	return v, s.failed("set_network", err)
}

func (s *Service) PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error) {
	v, err := s.Service.PauseWith(ctx, id, req)
	return v, s.failed("pause", err)
}

func (s *Service) SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error) {
	v, err := s.Service.SetCPUClass(ctx, id, class)
	return v, s.failed("set_cpu_class", err)
}

// Screenshot counts its errors like the other operations.
func (s *Service) Screenshot(ctx context.Context, id string) ([]byte, error) {
	v, err := s.Service.Screenshot(ctx, id)
	return v, s.failed("screenshot", err)
}

func (s *Service) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	v, err := s.Service.SendInput(ctx, id, req)
	return v, s.failed("input", err)
}
