package mock_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
)

// TestScreenshot: with Config.Screen the mock claims the capability and its
// instances return a PNG of that size; without, neither.
func TestScreenshot(t *testing.T) {
	ctx := context.Background()
	for _, size := range []image.Point{{}, {32, 24}} {
		d, err := mock.New(mock.Config{Host: mock.NewHost(), StateDir: t.TempDir(), Screen: size})
		if err != nil {
			t.Fatal(err)
		}
		want := size != image.Point{}
		if d.Capabilities().Screenshot != want {
			t.Fatalf("screen %v: Capabilities.Screenshot = %v", size, !want)
		}
		inst, err := d.Start(ctx, driver.Spec{ID: "sb1.mock", Image: "tiny"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := inst.(driver.Screenshotter).Screenshot(ctx)
		switch {
		case !want:
			if err == nil {
				t.Fatal("a mock without a screen took a screenshot")
			}
		case err != nil:
			t.Fatal(err)
		default:
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil || img.Bounds().Size() != size {
				t.Fatalf("screenshot: %v %v, want %v", img.Bounds(), err, size)
			}
		}
		if err := inst.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := inst.(driver.Screenshotter).Screenshot(ctx); want && err == nil {
			t.Fatal("a destroyed sandbox took a screenshot")
		}
	}
}
