package session

import (
	"context"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// createEachParallel bounds the creates of a batch that the service below
// runs one at a time (it has no CreateBatch).
const createEachParallel = 16

// Validating is the interceptor that checks every create and exec request once,
// where it enters the session service: api.CreateSandboxRequest.Validate,
// api.BatchCreateRequest.Validate and api.ExecRequest.Validate. Every role puts
// it outermost in its chain (dsec server's front ends, the API tier), so a
// malformed request never reaches the trajectory log, metrics or a project's
// quota and creates nothing; the node agent and the node RPC trust it (the node
// RPC is called only by the API tier, which validated). A front end that must
// check an exec itself before it answers (a stream's first event) marks the
// context with ExecValidated and the interceptor passes the request on.
// checked, if not nil, is told of each check (tests count them).
func Validating(checked func(what string, err error)) Interceptor {
	return func(next Service) Service { return validating{Service: next, checked: checked} }
}

type validating struct {
	Service
	checked func(what string, err error)
}

func (v validating) check(what string, err error) error {
	if v.checked != nil {
		v.checked(what, err)
	}
	return err
}

func (v validating) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if err := v.check("create", req.Validate()); err != nil {
		return api.Sandbox{}, err
	}
	return v.Service.Create(ctx, req)
}

// CreateBatch validates the batch as a whole, then creates it with the
// service's CreateBatch or, for a service without one, one by one (CreateEach)
// through the rest of the chain: each member is checked once, here.
func (v validating) CreateBatch(ctx context.Context, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	if err := v.check("create_batch", api.BatchCreateRequest{Sandboxes: reqs}.Validate()); err != nil {
		return nil, err
	}
	out, err := v.Service.CreateBatch(ctx, reqs)
	if errdefs.Is(err, api.CodeNotImplemented) {
		return CreateEach(ctx, len(reqs), createEachParallel,
			func(ctx context.Context, i int) (api.Sandbox, error) { return v.Service.Create(ctx, reqs[i]) },
			v.Service.Delete, nil)
	}
	return out, err
}

func (v validating) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	if err := v.check("exec", req.Validate()); err != nil {
		return api.ExecResult{}, err
	}
	return v.Service.Exec(ctx, id, req)
}

func (v validating) ExecStream(ctx context.Context, id string, req api.ExecRequest, s Stream) (api.ExecResult, error) {
	if ctx.Value(execValidatedKey{}) == nil {
		if err := v.check("exec_stream", req.Validate()); err != nil {
			return api.ExecResult{}, err
		}
	}
	return v.Service.ExecStream(ctx, id, req, s)
}

func (v validating) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	if err := v.check("start_process", req.Validate()); err != nil {
		return api.Process{}, err
	}
	return v.Service.StartProcess(ctx, id, req)
}

func (v validating) FollowProcess(ctx context.Context, id, procID string, req api.FollowRequest) (api.ProcessOutput, error) {
	if err := v.check("follow_process", req.Validate()); err != nil {
		return api.ProcessOutput{}, err
	}
	return v.Service.FollowProcess(ctx, id, procID, req)
}

type execValidatedKey struct{}

// ExecValidated marks ctx as carrying a streaming exec that its front end has
// validated (api.ExecRequest.Validate) before answering: /v1's exec stream
// refuses a bad request as a plain error before its first event and then
// moves the request's stdin into the stream, so it checks the request as it
// arrived, once, and Validating does not check it again.
func ExecValidated(ctx context.Context) context.Context {
	return context.WithValue(ctx, execValidatedKey{}, true)
}
