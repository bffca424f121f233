package session

import "context"

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
