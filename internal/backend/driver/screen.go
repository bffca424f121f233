package driver

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Screenshotter is implemented by instances with a display
// (Capabilities.Screenshot).
type Screenshotter interface {
	// Screenshot returns what the display shows now, as a PNG.
	Screenshot(ctx context.Context) ([]byte, error)
}

// Input is implemented by instances that take keyboard and mouse input on
// their display (Capabilities.Input). A bad request (unknown key name,
// a click outside the display) is an invalid_argument error and sends nothing.
type Input interface {
	SendInput(ctx context.Context, req api.InputRequest) (api.InputResult, error)
}
