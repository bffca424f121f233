package metrics

import (
	"context"

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
	return passThrough(s, "screenshot", "cannot take screenshots", func(sc session.Screenshotter) ([]byte, error) {
		return sc.Screenshot(ctx, id)
	})
}

// SendInput passes through to the inner service (session.InputSender).
func (s *Service) SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error) {
	return passThrough(s, "input", "cannot take input", func(in session.InputSender) (api.InputResult, error) {
		return in.SendInput(ctx, id, req)
	})
}
