package agenttest

import (
	"context"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FnCalls returns an interceptor that answers FnCall with call and forwards
// everything else: the FnCall engine a node composes over its agent (which
// serves no FnCall itself), for tests that need FnCalls to run but not the
// judge (internal/backend/fncall needs root and its helper binary).
func FnCalls(call func(context.Context, api.FnCallRequest) (api.FnCallResult, error)) session.Interceptor {
	return func(next session.Service) session.Service { return fnCalls{next, call} }
}

type fnCalls struct {
	session.Service
	call func(context.Context, api.FnCallRequest) (api.FnCallResult, error)
}

func (s fnCalls) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	return s.call(ctx, req)
}
