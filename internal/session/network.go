package session

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Networker is implemented by Services that govern sandboxes' egress (see
// internal/netpolicy). SetNetwork replaces sandbox id's policy and returns
// the sandbox; a bad policy is invalid_argument and changes nothing.
type Networker interface {
	SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error)
}
