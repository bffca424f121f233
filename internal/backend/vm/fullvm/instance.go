package fullvm

import (
	"context"
	"sync"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/vm/qmp"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// core is what the microvm instance offers beyond driver.Instance.
type core interface {
	driver.Instance
	driver.Pauser
	driver.Stats
	VMAccel() *api.VMAccel
	QMP(ctx context.Context, fn func(*qmp.Conn) error) error
	Release()
	QEMUPath(p string) string
}

// instance is one full VM: the microvm instance plus the display.
type instance struct {
	core

	mu   sync.Mutex // orders screendumps and input; guards w, h
	w, h int        // display size at the last screendump (0: unknown)
}

func wrap(inst driver.Instance) *instance {
	c, ok := inst.(core)
	if !ok {
		// The microvm core always is one; a mismatch is a programming error
		// that must not hide the display capabilities silently.
		panic("fullvm: microvm instance lacks the expected methods")
	}
	return &instance{core: c}
}

func (in *instance) qmpErr(err error, what string) error {
	if errdefs.CodeOf(err) != api.CodeInternal && errdefs.CodeOf(err) != "" {
		return err
	}
	return errdefs.Internal(err, "fullvm: %s", what)
}

var (
	_ driver.Screenshotter = (*instance)(nil)
	_ driver.Input         = (*instance)(nil)
	_ driver.Pauser        = (*instance)(nil)
)
