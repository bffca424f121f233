package trajectory

import (
	"context"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Screenshot passes through to the wrapped service ;
// it is not a trajectory step (it changes nothing).
func (s *Service) Screenshot(ctx context.Context, id string) ([]byte, error) {
	return s.inner.Screenshot(session.WithoutStep(ctx), id)
}

// SendInput passes through to the wrapped service . It
// is not logged as a step: what input does depends on what the display shows
// at that instant, which a replay cannot reproduce.
func (s *Service) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	return s.inner.SendInput(session.WithoutStep(ctx), id, req)
}
