package session_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// recorder is a service that only creates and streams: it records what reaches it.
type recorder struct {
	session.Unimplemented
	creates, streams atomic.Int32 // CreateEach creates in parallel
}

func (r *recorder) Create(context.Context, api.CreateSandboxRequest) (api.Sandbox, error) {
	r.creates.Add(1)
	return api.Sandbox{ID: "sb"}, nil
}

func (r *recorder) ExecStream(context.Context, string, api.ExecRequest, session.Stream) (api.ExecResult, error) {
	r.streams.Add(1)
	return api.ExecResult{}, nil
}

// TestValidating: a malformed request is refused with invalid_argument and
// reaches nothing; a batch for a service without CreateBatch is created one by
// one; a stream its front end marked validated is not checked again.
func TestValidating(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	var checks int
	svc := session.Chain(rec, session.Validating(func(string, error) { checks++ }))

	_, err := svc.Create(ctx, api.CreateSandboxRequest{CPU: -1})
	if !errdefs.Is(err, api.CodeInvalidArgument) || rec.creates.Load() != 0 {
		t.Errorf("bad create: %v, %d creates reached the service", err, rec.creates.Load())
	}
	_, err = svc.CreateBatch(ctx, []api.CreateSandboxRequest{{}, {TTLSeconds: -1}})
	if !errdefs.Is(err, api.CodeInvalidArgument) || rec.creates.Load() != 0 {
		t.Errorf("bad batch: %v, %d creates reached the service", err, rec.creates.Load())
	}
	out, err := svc.CreateBatch(ctx, []api.CreateSandboxRequest{{}, {}, {}})
	if err != nil || len(out) != 3 || rec.creates.Load() != 3 {
		t.Errorf("batch over a service without CreateBatch: %v, %d sandboxes, %d creates", err, len(out), rec.creates.Load())
	}
	if checks != 3 {
		t.Errorf("%d checks for 3 requests", checks)
	}

	bad := api.ExecRequest{Shell: "true", Cmd: []string{"true"}}
	if _, err := svc.ExecStream(ctx, "sb", bad, session.Stream{}); !errdefs.Is(err, api.CodeInvalidArgument) || rec.streams.Load() != 0 {
		t.Errorf("bad stream: %v, %d streams reached the service", err, rec.streams.Load())
	}
	checks = 0
	good := api.ExecRequest{Cmd: []string{"true"}}
	if _, err := svc.ExecStream(session.ExecValidated(ctx), "sb", good, session.Stream{}); err != nil || rec.streams.Load() != 1 || checks != 0 {
		t.Errorf("a stream marked validated: %v, %d streams, %d checks", err, rec.streams.Load(), checks)
	}
}
