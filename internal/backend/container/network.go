package container

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

var _ driver.NetworkDriver = (*Driver)(nil)
var _ driver.Networker = (*instance)(nil)

// ValidateNetwork implements driver.NetworkDriver.
func (d *Driver) ValidateNetwork(p api.NetworkPolicy) error {
	if d.cfg.Network == nil {
		if p.Empty() {
			return nil
		}
		return errdefs.New(api.CodeNotImplemented, "network: this node offers no egress (no network policy manager configured)")
	}
	_, err := d.cfg.Network.Resolve(p)
	return err
}

// NetworkAtStart implements driver.NetworkAtStart: Start applies
// Spec.Network.
func (d *Driver) NetworkAtStart() bool { return d.cfg.Network != nil }

// startNetwork applies spec.Network to the network namespace of init pid,
// which has just been cloned and waits for its go-ahead, in the
// background; the channel gives the result. Nil channel: no policy (or no
// network manager: SetNetwork's answer).
func (d *Driver) startNetwork(ctx context.Context, spec driver.Spec, pid int) (<-chan error, error) {
	if spec.Network == nil || d.cfg.Network == nil {
		return nil, nil
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("network namespace of init %d: %w", pid, err)
	}
	done := make(chan error, 1)
	go func() {
		defer ns.Close()
		done <- d.cfg.Network.Apply(ctx, spec.ID, ns, *spec.Network)
	}()
	return done, nil
}

// SetNetwork implements driver.Networker: the policy applies to the init's
// network namespace, opened through /proc and checked against the pidfd so a
// reused pid cannot redirect it.
func (in *instance) SetNetwork(ctx context.Context, p api.NetworkPolicy) error {
	if err := in.d.ValidateNetwork(p); err != nil {
		return err
	}
	if in.d.cfg.Network == nil {
		return nil
	}
	if !in.alive() {
		return in.gone()
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", in.st.PID))
	if err != nil {
		return in.gone()
	}
	defer ns.Close()
	if err := unix.PidfdSendSignal(int(in.pidfd.Fd()), 0, nil, 0); err != nil {
		return in.gone()
	}
	return in.d.cfg.Network.Apply(ctx, in.id, ns, p)
}

// Network implements driver.Networker.
func (in *instance) Network() (*api.NetworkStatus, error) {
	if in.d.cfg.Network == nil {
		return nil, nil
	}
	return in.d.cfg.Network.Status(in.id)
}
