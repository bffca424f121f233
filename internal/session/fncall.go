package session

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// FnCaller runs FnCalls: one-shot sandboxes for short programs (online judge). A
// node that serves FnCall implements it next to Service; decorators that wrap a
// Service (the trajectory log) implement it too and pass calls on.
type FnCaller interface {
	FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error)
}
