package trajectory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Operations that may be steps of a trajectory.
const (
	OpExec          = "exec"
	OpExecStream    = "exec_stream"
	OpStartProcess  = "start_process"
	OpWriteFile     = "write_file"
	OpUploadArchive = "upload_archive"
	OpReadFile      = "read_file"
	OpMkdir         = "mkdir"
	OpRemove        = "remove"
	OpHTTP          = "http"
	// OpFnCall is a FnCall run (POST /v1/fncall): a step with no sandbox. It is
	// replayed like any other and skipped by a rebuild (it changes no sandbox).
	OpFnCall = "fncall"
)

// Mutating reports whether a rebuild re-executes steps of op.
func Mutating(op string) bool {
	switch op {
	case OpExec, OpExecStream, OpStartProcess, OpWriteFile, OpUploadArchive, OpMkdir, OpRemove:
		return true
	}
	return false
}

// Limits.
const (
	// MaxBodyLog is the largest answer (and request body) the log keeps; a larger
	// answer is kept as its sha256 and cannot be replayed, a larger request body
	// cannot be re-executed by a rebuild.
	MaxBodyLog = 16 << 20
	// MaxStep bounds step numbers (session.MaxStep).
	MaxStep = session.MaxStep
)

// Meta describes a trajectory.
type Meta struct {
	ID        string                   `json:"id"`
	SandboxID string                   `json:"sandbox_id"`
	Sandboxes []string                 `json:"sandboxes"`
	Create    api.CreateSandboxRequest `json:"create"`
	CreatedAt time.Time                `json:"created_at"`
	UpdatedAt time.Time                `json:"updated_at"`
	Last      int                      `json:"last"`  // highest step recorded
	Count     int                      `json:"count"` // steps recorded
	Rebuilds  int                      `json:"rebuilds,omitempty"`
	// Replays counts re-issued steps answered from the log; Divergences the
	// re-issued steps refused because they differed from the logged one.
	Replays     int `json:"replays,omitempty"`
	Divergences int `json:"divergences,omitempty"`
}

// Result is a step's logged answer. Format FormatTyped (written by the decorator):
// Body is the JSON of the step's Outcome. FormatHTTP (logs written before it):
// Status, Header and Body are the raw /v1 answer. Read either with Outcome.
type Result struct {
	Format     int               `json:"format,omitempty"`
	Status     int               `json:"status,omitempty"`
	Header     map[string]string `json:"header,omitempty"`
	Body       []byte            `json:"-"` // stored apart from the step record
	BodySize   int64             `json:"body_size"`
	BodySHA256 string            `json:"body_sha256"`
	Truncated  bool              `json:"truncated,omitempty"`
}

// Step is one logged step.
type Step struct {
	Trajectory  string          `json:"trajectory"`
	N           int             `json:"step"`
	Op          string          `json:"op"`
	Fingerprint string          `json:"fingerprint"`
	Args        json.RawMessage `json:"args"`
	// Input is the request body (file content, tar) when at most MaxBodyLog bytes;
	// a rebuild needs it. Stored apart from the record.
	Input       []byte     `json:"-"`
	InputStored bool       `json:"input_stored,omitempty"`
	SandboxID   string     `json:"sandbox_id"`
	State       string     `json:"state"`
	Boot        string     `json:"boot,omitempty"` // the store instance that started it
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	Result      *Result    `json:"result,omitempty"`
}

// BeginRequest asks to begin step N of a trajectory.
type BeginRequest struct {
	Trajectory  string
	N           int
	Op          string
	Fingerprint string
	Args        json.RawMessage
	Input       []byte
	InputStored bool
	SandboxID   string
	// Create holds the sandbox's parameters; used when the step starts a new
	// trajectory.
	Create api.CreateSandboxRequest
	Now    time.Time
}

// Decision is the answer of Begin.
type Decision struct {
	// Replay is the finished step to answer from; nil means the step was recorded
	// as started and must run live, then be finished (or aborted).
	Replay *Step
	// New says the step created the trajectory.
	New bool
}

// Tally is what Store.Tally adds to a trajectory's counts.
type Tally struct{ Replays, Divergences int }

// AbortMode says what Abort does with a started step.
type AbortMode int

const (
	// Rollback deletes the step: it had no effect and may be issued again.
	Rollback AbortMode = iota
	// MarkUnknown keeps it as of unknown outcome.
	MarkUnknown
)

// Store is a durable trajectory log. Begin and Finish are durable when they
// return. Errors that answer a request (diverged, outcome unknown, gap, conflict)
// are *api.Error values; anything else is a storage failure.
type Store interface {
	// Begin decides step N: a replay of the logged step, or a live run that it
	// records as started (see Decide for the rules).
	Begin(ctx context.Context, req BeginRequest) (Decision, error)
	// Finish records a started step's result.
	Finish(ctx context.Context, traj string, n int, res Result, now time.Time) error
	// Abort resolves a started step that will not be finished.
	Abort(ctx context.Context, traj string, n int, mode AbortMode) error
	// Get returns a trajectory and its steps (with bodies), or not_found.
	Get(ctx context.Context, traj string) (Meta, []Step, error)
	// List returns every trajectory, by ID.
	List(ctx context.Context) ([]Meta, error)
	// Delete removes a trajectory (not_found if none).
	Delete(ctx context.Context, traj string) error
	// Tally adds to the trajectory's replay and divergence counts (a trajectory
	// that no longer exists: nothing). The counts need no fsync of their own.
	Tally(ctx context.Context, traj string, t Tally) error
	// Rebind binds the trajectory to a new sandbox (after a rebuild).
	Rebind(ctx context.Context, traj, sandboxID string, now time.Time) error
	// Prune deletes trajectories not updated since olderThan (zero: none), then the
	// least recently updated ones beyond max (0: no limit); it returns how many.
	Prune(ctx context.Context, olderThan time.Time, max int) (int, error)
	Close() error
}

// NewBoot returns a random store-instance ID: a step started under another boot
// was interrupted by a restart.
func NewBoot() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// EffectiveState is the state a reader sees: a step started by an earlier store
// instance is unknown.
func EffectiveState(s *Step, boot string) string {
	if s.State == api.StepStarted && s.Boot != boot {
		return api.StepUnknown
	}
	return s.State
}

// Decide applies the replay rules. meta is nil for a new trajectory; cur is the
// logged step N, if any. It returns the replay step, or live=true when the step
// must be recorded as started and run.
//
//   - a new trajectory starts at step 1;
//   - N > last+1 is a gap: invalid_argument;
//   - a logged step with another fingerprint: trajectory_diverged;
//   - finished, same fingerprint: replay (conflict if its answer was too large);
//   - started by this store instance: conflict (in flight);
//   - started by an earlier instance, or marked unknown: outcome_unknown;
//   - not logged (N == last+1, or a rolled-back hole): live, in the bound sandbox
//     (a step with no sandbox, fncall, runs in any; the first step with one binds
//     a trajectory that had none).
func Decide(meta *Meta, cur *Step, req BeginRequest, boot string) (replay *Step, live bool, err error) {
	if meta == nil {
		if req.N != 1 {
			return nil, false, api.NewError(api.CodeInvalidArgument,
				"trajectory %q has no steps: its first step must be 1, not %d", req.Trajectory, req.N)
		}
		return nil, true, nil
	}
	if req.N > meta.Last+1 {
		return nil, false, api.NewError(api.CodeInvalidArgument,
			"step %d of trajectory %q skips ahead: the last logged step is %d, so the next is %d",
			req.N, req.Trajectory, meta.Last, meta.Last+1)
	}
	if cur != nil {
		if cur.Fingerprint != req.Fingerprint {
			return nil, false, api.NewError(api.CodeTrajectoryDiverged,
				"trajectory %q diverged at step %d: logged %s %s, requested %s %s",
				req.Trajectory, req.N, cur.Op, cur.Fingerprint, req.Op, req.Fingerprint)
		}
		if req.SandboxID != "" && !slices.Contains(meta.Sandboxes, req.SandboxID) && req.SandboxID != meta.SandboxID {
			return nil, false, api.NewError(api.CodeConflict,
				"trajectory %q is bound to sandbox %s, not %s", req.Trajectory, meta.SandboxID, req.SandboxID)
		}
		switch EffectiveState(cur, boot) {
		case api.StepFinished:
			if cur.Result != nil && cur.Result.Truncated {
				return nil, false, api.NewError(api.CodeConflict,
					"step %d of trajectory %q cannot be replayed: its answer (%d bytes, sha256 %s) was over the log's cap of %d bytes",
					req.N, req.Trajectory, cur.Result.BodySize, cur.Result.BodySHA256, MaxBodyLog)
			}
			return cur, false, nil
		case api.StepStarted:
			return nil, false, api.NewError(api.CodeConflict,
				"step %d of trajectory %q is running now", req.N, req.Trajectory)
		default:
			return nil, false, api.NewError(api.CodeOutcomeUnknown,
				"step %d of trajectory %q started but never finished (the server stopped while it ran): its outcome is unknown and it will not run again; go on with step %d",
				req.N, req.Trajectory, meta.Last+1)
		}
	}
	// A step without a sandbox (fncall) runs in any trajectory; the first sandbox
	// step of a trajectory that had none binds it.
	if req.SandboxID != "" && meta.SandboxID != "" && req.SandboxID != meta.SandboxID {
		if slices.Contains(meta.Sandboxes, req.SandboxID) {
			return nil, false, api.NewError(api.CodeConflict,
				"trajectory %q was rebuilt onto sandbox %s: send its new steps there, not to %s",
				req.Trajectory, meta.SandboxID, req.SandboxID)
		}
		return nil, false, api.NewError(api.CodeConflict,
			"trajectory %q is bound to sandbox %s, not %s", req.Trajectory, meta.SandboxID, req.SandboxID)
	}
	return nil, true, nil
}

// newMeta is the meta of a trajectory created by req.
func newMeta(req BeginRequest) *Meta {
	m := &Meta{ID: req.Trajectory, SandboxID: req.SandboxID, Create: req.Create, CreatedAt: req.Now, UpdatedAt: req.Now}
	if req.SandboxID != "" {
		m.Sandboxes = []string{req.SandboxID}
	}
	return m
}

// startedStep is the record Begin writes.
func startedStep(req BeginRequest, boot string) *Step {
	return &Step{Trajectory: req.Trajectory, N: req.N, Op: req.Op, Fingerprint: req.Fingerprint,
		Args: req.Args, Input: req.Input, InputStored: req.InputStored, SandboxID: req.SandboxID,
		State: api.StepStarted, Boot: boot, StartedAt: req.Now}
}

// ParseHeaders is session.ParseStepHeaders (front ends parse the headers
// without importing the trajectory decorator).
func ParseHeaders(traj, step string) (id string, n int, ok bool, err error) {
	return session.ParseStepHeaders(traj, step)
}

// ValidateID is session.ValidateTrajectoryID.
func ValidateID(id string) error { return session.ValidateTrajectoryID(id) }

func notFound(id string) error {
	return api.NewError(api.CodeNotFound, "no trajectory %q", id)
}

func notStarted(id string, n int) error {
	return errdefs.Conflict("step %d of trajectory %q is not running", n, id)
}
