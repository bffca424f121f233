package mock

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

var _ driver.Screenshotter = (*instance)(nil)

// Screenshot implements driver.Screenshotter: a PNG of Config.Screen's size, a
// colour gradient with the sandbox's ID hashed into its blue channel (so two
// sandboxes' screens differ). Without a Screen it is not_implemented.
func (in *instance) Screenshot(ctx context.Context) ([]byte, error) {
	size := in.d.cfg.Screen
	if size.X <= 0 || size.Y <= 0 {
		return nil, errdefs.New(api.CodeNotImplemented, "mock sandbox %s has no display", in.b.id)
	}
	if in.b.exited() {
		return nil, in.gone()
	}
	var seed uint8
	for i := 0; i < len(in.b.id); i++ {
		seed = seed*31 + in.b.id[i]
	}
	img := image.NewRGBA(image.Rect(0, 0, size.X, size.Y))
	for y := range size.Y {
		for x := range size.X {
			img.SetRGBA(x, y, color.RGBA{R: uint8(x * 255 / size.X), G: uint8(y * 255 / size.Y), B: seed, A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("mock: encoding screenshot: %w", err)
	}
	return buf.Bytes(), nil
}
