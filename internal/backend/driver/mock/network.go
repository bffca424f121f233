package mock

import (
	"context"
	"slices"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The mock answers network policies as a container driver does: without
// Config.Egress, like a node with no policy manager (a policy that allows
// nothing is accepted, any other is not_implemented); with it, a policy whose
// entries parse is kept and reported back by Network, but nothing enforces it
// (the mock's processes share the host's network), for tests of how a policy
// reaches a node.

var (
	_ driver.NetworkDriver = (*Driver)(nil)
	_ driver.Networker     = (*instance)(nil)
)

// ValidateNetwork implements driver.NetworkDriver.
func (d *Driver) ValidateNetwork(p api.NetworkPolicy) error {
	if !d.cfg.Egress {
		if p.Empty() {
			return nil
		}
		return errdefs.New(api.CodeNotImplemented, "network: this node offers no egress (the mock driver without Egress)")
	}
	for _, a := range p.Allow {
		if _, err := netpolicy.ParseEntry(a); err != nil {
			return errdefs.Invalid("network: allow entry %q: %v", a, err)
		}
	}
	_, err := netpolicy.RuleSets{}.Resolve(api.NetworkPolicy{AllowDomains: p.AllowDomains, DenyDomains: p.DenyDomains})
	return err
}

// SetNetwork implements driver.Networker.
func (in *instance) SetNetwork(ctx context.Context, p api.NetworkPolicy) error {
	if err := in.d.ValidateNetwork(p); err != nil {
		return err
	}
	if in.b.exited() {
		return in.gone()
	}
	if !in.d.cfg.Egress {
		return nil
	}
	in.b.mu.Lock()
	defer in.b.mu.Unlock()
	in.b.network = &api.NetworkStatus{Allow: slices.Clone(p.Allow), Rules: slices.Clone(p.Rules),
		AllowDomains: slices.Clone(p.AllowDomains), DenyDomains: slices.Clone(p.DenyDomains)}
	return nil
}

// Network implements driver.Networker.
func (in *instance) Network() (*api.NetworkStatus, error) {
	in.b.mu.Lock()
	defer in.b.mu.Unlock()
	if in.b.network == nil {
		return nil, nil
	}
	st := *in.b.network
	return &st, nil
}
