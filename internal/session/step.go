package session

import (
	"context"
	"strconv"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

const (
	// MaxStep bounds step numbers.
	MaxStep = 1 << 30
	// maxTrajectoryIDLen bounds trajectory IDs.
	maxTrajectoryIDLen = 128
)

// ParseStepHeaders parses the trajectory and step header values (api.TrajectoryHeader,
// api.StepHeader). Both empty: not a step (ok false). One without the other, a
// malformed ID or a step outside 1..MaxStep is invalid_argument.
func ParseStepHeaders(traj, step string) (id string, n int, ok bool, err error) {
	if traj == "" && step == "" {
		return "", 0, false, nil
	}
	if traj == "" || step == "" {
		return "", 0, false, errdefs.Invalid("headers %s and %s go together; got only one", api.TrajectoryHeader, api.StepHeader)
	}
	if err := ValidateTrajectoryID(traj); err != nil {
		return "", 0, false, err
	}
	for _, c := range []byte(step) {
		if c < '0' || c > '9' {
			return "", 0, false, errdefs.Invalid("%s must be a decimal step number >= 1, got %q", api.StepHeader, step)
		}
	}
	v, perr := strconv.ParseUint(step, 10, 32)
	if perr != nil || v < 1 || v > MaxStep {
		return "", 0, false, errdefs.Invalid("%s must be a step number in 1..%d, got %q", api.StepHeader, MaxStep, step)
	}
	return traj, int(v), true, nil
}

// ValidateTrajectoryID checks a trajectory ID: 1-128 characters of [A-Za-z0-9._:-].
func ValidateTrajectoryID(id string) error {
	if id == "" || len(id) > maxTrajectoryIDLen {
		return errdefs.Invalid("trajectory ID must be 1-%d characters, got %d", maxTrajectoryIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return errdefs.Invalid("trajectory ID %q: character %q is not allowed (use A-Z a-z 0-9 . _ : -)", id, c)
		}
	}
	return nil
}

// Step tags a session operation as step N of a trajectory. Front ends parse it from
// their wire form (the X-Dsec-Trajectory and X-Dsec-Step headers on /v1 and E2B)
// and attach it to the operation's context; the trajectory decorator reads it.
type Step struct {
	Trajectory string
	N          int
}

// StepOutcome is filled in by the trajectory decorator so the front end can tell
// its client how the step was answered.
type StepOutcome struct {
	// Replayed says the answer came from the log; nothing ran.
	Replayed bool
}

type stepKey struct{}

type stepVal struct {
	step Step
	out  *StepOutcome
}

// WithStep returns ctx tagged with step; the returned outcome is filled in by the
// trajectory decorator when it handles the operation.
func WithStep(ctx context.Context, step Step) (context.Context, *StepOutcome) {
	out := &StepOutcome{}
	return context.WithValue(ctx, stepKey{}, stepVal{step, out}), out
}

// StepFrom returns the step ctx is tagged with, and where to report its outcome.
func StepFrom(ctx context.Context) (Step, *StepOutcome, bool) {
	v, ok := ctx.Value(stepKey{}).(stepVal)
	if !ok || v.step.Trajectory == "" {
		return Step{}, nil, false
	}
	return v.step, v.out, true
}

// WithoutStep returns ctx with any step tag removed, for calls a decorator makes on
// its own behalf (a rebuild's replayed steps, a lookup of the sandbox).
func WithoutStep(ctx context.Context) context.Context {
	return context.WithValue(ctx, stepKey{}, stepVal{})
}
