package trajectory

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The decorator: Wrap returns a session.Service that treats every operation whose
// context carries a step tag (session.WithStep) as a step of a trajectory. It
// normalises the operation into a fingerprint, asks the store whether the step is
// a replay, and either answers from the log (setting StepOutcome.Replayed) or runs
// the operation on the inner service and logs its typed result durably before it
// returns. Operations without a tag pass through untouched.

// Options configures Wrap.
type Options struct {
	Logger *slog.Logger
	// TempDir holds spooled request bodies over MaxBodyLog (default os.TempDir()).
	TempDir string
	// OnStep, when set, is told every step the store decided: its operation,
	// whether it was replayed, and the store's error (a divergence or a
	// failure). The role's assembly points it at its metrics.
	OnStep func(op string, replayed bool, err error)
}

// Service is the trajectory decorator, a session.Service interceptor: it logs
// and replays tagged steps (FnCall and HTTP too) and serves the trajectory
// group (ListTrajectories, GetTrajectory, DeleteTrajectory, RebuildTrajectory;
// and PruneTrajectories). Every other method passes through to the inner
// service.
type Service struct {
	session.Service
	inner session.Service
	store Store
	opts  Options
	log   *slog.Logger

	httpOnce sync.Once
	client   *http.Client
}

var _ session.Service = (*Service)(nil)

// Wrap returns inner with the trajectory log store in front of it.
func Wrap(inner session.Service, store Store, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{Service: inner, inner: inner, store: store, opts: opts, log: opts.Logger}
}

// Info adds the trajectory group to the inner service's.
func (s *Service) Info(ctx context.Context) (api.Info, error) {
	info, err := s.inner.Info(ctx)
	if err != nil {
		return info, err
	}
	return session.WithServices(info, api.ServiceTrajectories), nil
}

// Interceptor returns Wrap over store as a session.Interceptor (for
// session.Chain).
func Interceptor(store Store, opts Options) session.Interceptor {
	return func(next session.Service) session.Service { return Wrap(next, store, opts) }
}

// stepSpec is a tagged operation, normalised.
type stepSpec struct {
	op      string
	sandbox string // "" for an operation without one (fncall)
	args    any
	input   []byte // body kept for a rebuild (stdin, file content, tar)
	stored  bool   // input is the whole body
}

// live is a step recorded as started that must be settled: finished with its
// outcome, rolled back or marked unknown, exactly once.
type live struct {
	s    *Service
	ctx  context.Context // without cancellation: settling must not be cut
	tag  session.Step
	spec stepSpec

	mu      sync.Mutex
	settled bool
}

// begin decides a tagged step. It returns the logged outcome of a replay (out is
// marked replayed), or the live step to run; err answers the call.
func (s *Service) begin(ctx context.Context, tag session.Step, out *session.StepOutcome, spec stepSpec) (*Outcome, *live, error) {
	fp, args, err := Fingerprint(spec.op, spec.args)
	if err != nil {
		return nil, nil, errdefs.Internal(err, "fingerprint")
	}
	breq := BeginRequest{Trajectory: tag.Trajectory, N: tag.N, Op: spec.op, Fingerprint: fp, Args: args,
		Input: spec.input, InputStored: spec.stored, SandboxID: spec.sandbox, Now: time.Now()}
	var sb api.Sandbox
	var sbErr error
	if spec.sandbox != "" { // the step may start or bind the trajectory: it keeps the sandbox's parameters
		sb, sbErr = s.inner.Get(session.WithoutStep(ctx), spec.sandbox)
		if sbErr == nil {
			breq.Create = createParams(sb)
		}
	}
	dec, err := s.store.Begin(ctx, breq)
	if s.opts.OnStep != nil {
		s.opts.OnStep(spec.op, err == nil && dec.Replay != nil, err)
	}
	if err != nil {
		if errdefs.Is(err, api.CodeTrajectoryDiverged) {
			s.tally(ctx, tag.Trajectory, Tally{Divergences: 1})
		}
		return nil, nil, err
	}
	if dec.Replay != nil {
		s.tally(ctx, tag.Trajectory, Tally{Replays: 1})
		o, err := dec.Replay.Result.Outcome(dec.Replay.Op)
		if err != nil {
			return nil, nil, errdefs.Internal(err, "step %d of trajectory %q", tag.N, tag.Trajectory)
		}
		if out != nil {
			out.Replayed = true
		}
		return &o, nil, nil
	}
	l := &live{s: s, ctx: context.WithoutCancel(ctx), tag: tag, spec: spec}
	if lost, cause := sandboxLost(sb, sbErr); spec.sandbox != "" && lost {
		l.abort(Rollback)
		if dec.New {
			return nil, nil, sbErr // a new trajectory on a sandbox that does not exist
		}
		return nil, nil, lostError(tag.Trajectory, spec.sandbox, cause)
	}
	return nil, l, nil
}

// tally counts a replay or a divergence; a failure to count is logged, the step's
// answer stands.
func (s *Service) tally(ctx context.Context, traj string, t Tally) {
	if err := s.store.Tally(context.WithoutCancel(ctx), traj, t); err != nil {
		s.log.WarnContext(ctx, "trajectory: counting a replay or divergence", "trajectory", traj, "err", err)
	}
}

// claim marks l settled; false if it already was.
func (l *live) claim() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.settled {
		return false
	}
	l.settled = true
	return true
}

func (l *live) abort(mode AbortMode) {
	if !l.claim() {
		return
	}
	if err := l.s.store.Abort(l.ctx, l.tag.Trajectory, l.tag.N, mode); err != nil {
		l.s.log.ErrorContext(l.ctx, "trajectory: abort step", "trajectory", l.tag.Trajectory, "step", l.tag.N, "err", err)
	}
}

// finish logs the step's result durably.
func (l *live) finish(res Result) {
	if !l.claim() {
		return
	}
	if err := l.s.store.Finish(l.ctx, l.tag.Trajectory, l.tag.N, res, time.Now()); err != nil {
		l.s.log.ErrorContext(l.ctx, "trajectory: step ran but was not logged", "trajectory", l.tag.Trajectory, "step", l.tag.N, "err", err)
		if err := l.s.store.Abort(l.ctx, l.tag.Trajectory, l.tag.N, MarkUnknown); err != nil {
			l.s.log.ErrorContext(l.ctx, "trajectory: abort step", "trajectory", l.tag.Trajectory, "step", l.tag.N, "err", err)
		}
	}
}

// finishOutcome logs o, or marks the step unknown if o cannot be encoded.
func (l *live) finishOutcome(o Outcome) {
	res, err := TypedResult(o)
	if err != nil {
		l.s.log.ErrorContext(l.ctx, "trajectory: step outcome", "trajectory", l.tag.Trajectory, "step", l.tag.N, "err", err)
		l.abort(MarkUnknown)
		return
	}
	if !res.Truncated && len(res.Body) > MaxBodyLog+(MaxBodyLog/2) {
		res = truncatedResult(res.BodySize, res.BodySHA256)
	}
	l.finish(res)
}

// fail settles a step whose operation returned err and returns what the caller
// gets: a sandbox that disappeared is trajectory_sandbox_lost and a retryable dsec
// failure (internal, unavailable, resource_exhausted, deadline_exceeded) is not
// logged, so the step may be re-issued; any other error is the step's result.
func (l *live) fail(err error) error {
	code := errdefs.CodeOf(err)
	sb := l.spec.sandbox
	gone := sb != "" && code == api.CodeSandboxGone
	if sb != "" && code == api.CodeNotFound {
		_, gerr := l.s.inner.Get(session.WithoutStep(l.ctx), sb)
		gone = errdefs.Is(gerr, api.CodeNotFound)
	}
	switch {
	case gone:
		l.abort(Rollback)
		return lostError(l.tag.Trajectory, sb, "it disappeared while the step ran")
	case api.NewError(code, "").Retryable:
		l.abort(Rollback)
		return err
	}
	l.finishOutcome(Outcome{Error: wireError(err)})
	return err
}

// guard marks the step unknown if the operation panicked before it was settled.
func (l *live) guard() {
	if r := recover(); r != nil {
		l.abort(MarkUnknown)
		panic(r)
	}
}

// wireError is err as the classified wire error a replay returns.
func wireError(err error) *api.Error {
	e := errdefs.ToAPI(err)
	c := *e
	c.Status = api.StatusOf(c.Code)
	return &c
}

// replayError is a logged error result as the error to return.
func replayError(o *Outcome) error {
	e := *o.Error
	e.Status = api.StatusOf(e.Code)
	return &e
}

// sandboxLost says whether a sandbox lookup shows the sandbox is gone.
func sandboxLost(sb api.Sandbox, err error) (bool, string) {
	switch {
	case err != nil && errdefs.Is(err, api.CodeNotFound):
		return true, "it no longer exists"
	case err != nil && errdefs.Is(err, api.CodeSandboxGone):
		return true, "its processes died"
	case err == nil && sb.State == api.StateExited:
		return true, "its init exited"
	}
	return false, ""
}

func lostError(traj, sandboxID, cause string) error {
	return api.NewError(api.CodeTrajectorySandboxLost,
		"sandbox %s of trajectory %q is gone (%s): POST /v1/trajectories/%s/rebuild replays the logged steps onto a fresh sandbox",
		sandboxID, traj, cause, traj)
}

// createParams are the parameters a rebuild creates a replacement sandbox with.
func createParams(sb api.Sandbox) api.CreateSandboxRequest {
	c := api.CreateSandboxRequest{Backend: sb.Backend, Image: sb.Image, CPU: sb.CPU, MemoryBytes: sb.MemoryBytes,
		DiskBytes: sb.DiskBytes, PidsMax: sb.PidsMax, IdleTimeoutSeconds: sb.IdleTimeoutSeconds, Env: sb.Env, Labels: sb.Labels}
	if sb.ExpiresAt != nil {
		c.TTLSeconds = max(1, int64(sb.ExpiresAt.Sub(sb.CreatedAt)/time.Second))
	}
	return c
}

// mustJSON encodes v for a step's input (a value that always encodes).
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("trajectory: encoding %T: %v", v, err))
	}
	return b
}
