package metrics

import (
	"context"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

var (
	_ session.Screenshotter = (*Service)(nil)
	_ session.InputSender   = (*Service)(nil)
)

// Screenshot passes through to the inner service (session.Screenshotter),
// counting its errors like the other operations.
func (s *Service) Screenshot(ctx context.Context, id string) ([]byte, error) {
	sc, ok := s.inner.(session.Screenshotter)
	if !ok {
		return nil, s.failed("screenshot", errdefs.New(api.CodeNotImplemented, "this node cannot take screenshots"))
	}
	b, err := sc.Screenshot(ctx, id)
	return b, s.failed("screenshot", err)
}

// SendInput passes through to the inner service (session.InputSender).
func (s *Service) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	in, ok := s.inner.(session.InputSender)
	if !ok {
		return api.InputResult{}, s.failed("input", errdefs.New(api.CodeNotImplemented, "this node cannot take input"))
	}
	v, err := in.SendInput(ctx, id, req)
	return v, s.failed("input", err)
}
