package trajectory

import (
	"context"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Fork passes a fork through to the wrapped service; it is not a trajectory
// step: the children are new sandboxes, each with its own history.
func (s *Service) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	return s.inner.Fork(session.WithoutStep(ctx), id, req)
}

// Commit passes a commit through to the wrapped service; it is not a
// trajectory step (it changes no sandbox).
func (s *Service) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	return s.inner.Commit(session.WithoutStep(ctx), id, req)
}
