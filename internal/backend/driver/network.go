package driver

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// NetworkDriver is implemented by drivers that can give sandboxes egress
// under a policy (see internal/netpolicy). ValidateNetwork checks a policy
// (syntax, rule names, bounds) before anything is created; its errors are
// invalid_argument.
type NetworkDriver interface {
	ValidateNetwork(p api.NetworkPolicy) error
}

// Networker is implemented by instances of a NetworkDriver. SetNetwork
// replaces the sandbox's policy (the first one that allows anything gives it
// a link); Network reports it, nil for a loopback-only sandbox.
type Networker interface {
	SetNetwork(ctx context.Context, p api.NetworkPolicy) error
	Network() (*api.NetworkStatus, error)
}

// NetworkAtStart is implemented by a NetworkDriver whose Start applies
// Spec.Network itself, side by side with the sandbox's own start (a
// container's link is made while its init sets up its mounts). Start then
// fails with the policy's error, leaving nothing of it behind.
type NetworkAtStart interface {
	NetworkAtStart() bool
}
