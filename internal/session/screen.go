package session

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Screenshotter is an optional part of a Service: the display of a sandbox
// whose backend has one (driver.Capabilities.Screenshot), as a PNG. The same
// rules as Forker apply: a front end answers not_implemented without it, the
// implementation answers not_implemented for a backend without a display.
type Screenshotter interface {
	Screenshot(ctx context.Context, id string) ([]byte, error)
}

// InputSender is an optional part of a Service: keyboard and mouse input on
// a sandbox's display (driver.Capabilities.Input); rules as Screenshotter.
type InputSender interface {
	SendInput(ctx context.Context, id string, req api.InputRequest) (api.InputResult, error)
}
