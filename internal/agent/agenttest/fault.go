package agenttest

import (
	"context"

	"github.com/dsec-dev/dsec/internal/backend/driver"
)

// FailStart wraps d so that a sandbox's start fails with the error fail
// returns for its spec (nil: it starts), for tests of how an error the node
// answers (a full node, a broken backend) reaches a caller.
func FailStart(d driver.Driver, fail func(driver.Spec) error) driver.Driver {
	return failStart{d, fail}
}

type failStart struct {
	driver.Driver
	fail func(driver.Spec) error
}

func (f failStart) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	if err := f.fail(spec); err != nil {
		return nil, err
	}
	return f.Driver.Start(ctx, spec)
}
