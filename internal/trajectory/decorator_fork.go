package trajectory

import (
	"context"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Fork passes a fork through to the wrapped service (session.Forker); it is not
// a trajectory step: the children are new sandboxes, each with its own history.
func (s *Service) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	f, ok := s.inner.(session.Forker)
	if !ok {
		return api.ForkResult{}, errdefs.New(api.CodeNotImplemented, "this node cannot fork sandboxes")
	}
	return f.Fork(session.WithoutStep(ctx), id, req)
}

// Commit passes a commit through to the wrapped service (session.Committer); it
// is not a trajectory step (it changes no sandbox).
func (s *Service) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	c, ok := s.inner.(session.Committer)
	if !ok {
		return api.CommitResult{}, errdefs.New(api.CodeNotImplemented, "this node cannot commit sandboxes")
	}
	return c.Commit(session.WithoutStep(ctx), id, req)
}

var (
	_ session.Forker    = (*Service)(nil)
	_ session.Committer = (*Service)(nil)
)
