package agent

import (
	"context"
	"log/slog"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// checkNetwork validates a create request's network policy for its backend
// before anything is created (invalid_argument for a bad policy,
// not_implemented when the backend offers no egress).
func (m *Manager) checkNetwork(backend string, p *api.NetworkPolicy) error {
	if p == nil {
		return nil
	}
	drv, err := m.drivers.Get(backend)
	if err != nil {
		return err
	}
	nd, ok := drv.(driver.NetworkDriver)
	if !ok {
		return errdefs.New(api.CodeNotImplemented, "backend %q offers no network policy", backend)
	}
	return nd.ValidateNetwork(*p)
}

// applyNetwork gives a just-started instance its policy (nil: none).
func applyNetwork(ctx context.Context, inst driver.Instance, p *api.NetworkPolicy) error {
	if p == nil {
		return nil
	}
	n, ok := inst.(driver.Networker)
	if !ok {
		return errdefs.New(api.CodeNotImplemented, "this backend offers no network policy")
	}
	return n.SetNetwork(ctx, *p)
}

// networkStatus is the "network" field of a sandbox view (nil: loopback only).
func networkStatus(inst driver.Instance, log *slog.Logger) *api.NetworkStatus {
	n, ok := inst.(driver.Networker)
	if !ok || driver.Exited(inst) {
		return nil
	}
	st, err := n.Network()
	if err != nil {
		log.Warn("read network status", "id", inst.ID(), "err", err)
	}
	return st
}

// SetNetwork replaces a sandbox's egress policy (PUT
// /v1/sandboxes/{id}/network): new connections see the new policy at once,
// established ones go on. The policy is kept in the record, so it survives a
// restart of the agent and is applied again by Reset.
func (m *Manager) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error) {
	sb, inst, err := m.session(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if err := m.checkNetwork(sb.rec.Backend, &p); err != nil { // Backend never changes
		return api.Sandbox{}, err
	}
	sb.mu.Lock()
	err = applyNetwork(ctx, inst, &p)
	if err == nil {
		sb.rec.Network = &p
		err = sb.save()
	}
	sb.mu.Unlock()
	sb.touch()
	if err != nil {
		return api.Sandbox{}, err
	}
	return sb.view(), nil
}
