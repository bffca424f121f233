package trajectory

import (
	"context"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// SetNetwork passes a sandbox's egress policy change to the inner service
// (it is not a step: it changes what later steps may reach, like a create
// parameter).
func (s *Service) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error) {
	return s.inner.SetNetwork(session.WithoutStep(ctx), id, p)
}
