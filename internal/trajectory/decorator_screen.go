package trajectory

import (
	"context"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Screenshot passes through to the wrapped service (session.Screenshotter);
// it is not a trajectory step (it changes nothing).
func (s *Service) Screenshot(ctx context.Context, id string) ([]byte, error) {
	sc, ok := s.inner.(session.Screenshotter)
	if !ok {
		return nil, errdefs.New(api.CodeNotImplemented, "this node cannot take screenshots")
	}
	return sc.Screenshot(session.WithoutStep(ctx), id)
}

// SendInput passes through to the wrapped service (session.InputSender). It
// is not logged as a step: what input does depends on what the display shows
// at that instant, which a replay cannot reproduce.
func (s *Service) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	in, ok := s.inner.(session.InputSender)
	if !ok {
		return api.InputResult{}, errdefs.New(api.CodeNotImplemented, "this node cannot take input")
	}
	return in.SendInput(session.WithoutStep(ctx), id, req)
}

var (
	_ session.Screenshotter = (*Service)(nil)
	_ session.InputSender   = (*Service)(nil)
)
