package trajectory

import (
	"context"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FnCall runs a FnCall on the inner service; it is a step (fncall, with no sandbox) when ctx is tagged. Its input is the
// request as JSON; a rebuild skips it.
func (s *Service) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	fc := s.inner
	tag, out, ok := session.StepFrom(ctx)
	if !ok {
		return fc.FnCall(ctx, req)
	}
	spec := stepSpec{op: OpFnCall, args: NormalizeFnCall(req)}
	if in := mustJSON(req); len(in) <= MaxBodyLog {
		spec.input, spec.stored = in, true
	}
	o, l, err := s.begin(ctx, tag, out, spec)
	switch {
	case err != nil:
		return api.FnCallResult{}, err
	case o != nil:
		if o.Error != nil {
			return api.FnCallResult{}, replayError(o)
		}
		if o.FnCall == nil {
			return api.FnCallResult{}, errdefs.Internal(nil, "step %d of trajectory %q has no FnCall result", tag.N, tag.Trajectory)
		}
		return *o.FnCall, nil
	}
	defer l.guard()
	res, err := fc.FnCall(session.WithoutStep(l.ctx), req)
	if err != nil {
		return res, l.fail(err)
	}
	l.finishOutcome(Outcome{FnCall: &res})
	return res, nil
}
