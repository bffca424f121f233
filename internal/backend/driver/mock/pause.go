package mock

import (
	"context"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// pausable is an instance of a driver configured with Pause: it implements
// driver.Pauser by stopping (SIGSTOP) and continuing (SIGCONT) the process
// groups of the sandbox's running processes, as a cgroup freezer stops a
// container's; an exec into a paused box waits for Resume (a frozen
// container's would not run either).
type pausable struct{ *instance }

var _ driver.Pauser = pausable{}

// Pause implements driver.Pauser.
func (in pausable) Pause(ctx context.Context) error { return in.signalAll(true) }

// Resume implements driver.Pauser.
func (in pausable) Resume(ctx context.Context) error { return in.signalAll(false) }

func (in pausable) signalAll(pause bool) error {
	b := in.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return in.gone()
	}
	sig := unix.SIGCONT
	switch {
	case pause && b.thaw == nil:
		b.thaw, sig = make(chan struct{}), unix.SIGSTOP
	case pause:
		return nil
	case b.thaw != nil:
		close(b.thaw)
		b.thaw = nil
	}
	for p := range b.running {
		if err := unix.Kill(-p.pid, sig); err != nil && err != unix.ESRCH {
			return errdefs.Internal(err, "mock: signal %v to pid %d", sig, p.pid)
		}
	}
	return nil
}

// lockThawed locks b.mu once b is not paused, or fails when ctx ends first.
func (b *box) lockThawed(ctx context.Context) error {
	for {
		b.mu.Lock()
		thaw := b.thaw
		if thaw == nil {
			return nil
		}
		b.mu.Unlock()
		select {
		case <-thaw:
		case <-ctx.Done():
			return errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "mock: sandbox %s is paused", b.id)
		}
	}
}
