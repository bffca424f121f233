package agent_test

import (
	"bytes"
	"image"
	"image/png"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestMockScreen: a sandbox on a backend that takes screenshots says so in its
// view (screen) and Screenshot returns the display's PNG; one on a backend
// without a display does not, and Screenshot is not_implemented.
func TestMockScreen(t *testing.T) {
	e := newMockEnv(t)
	withScreen, err := mock.New(mock.Config{Host: e.host, StateDir: e.stateDir, BackendName: "mockscreen", Screen: image.Pt(40, 30)})
	if err != nil {
		t.Fatal(err)
	}
	m := e.open(t, e.driver(t, "", false), withScreen)
	ctx := ctxT(t)
	for _, backend := range []string{"mock", "mockscreen"} {
		sb, err := m.Create(ctx, api.CreateSandboxRequest{Backend: backend})
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Get(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := backend == "mockscreen"
		if sb.Screen != want || got.Screen != want {
			t.Fatalf("%s: screen %v (create) %v (get), want %v", backend, sb.Screen, got.Screen, want)
		}
		b, err := m.Screenshot(ctx, sb.ID)
		if !want {
			if code := errdefs.CodeOf(err); code != api.CodeNotImplemented {
				t.Fatalf("%s: screenshot: %v", backend, err)
			}
			continue
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil || img.Bounds().Size() != image.Pt(40, 30) {
			t.Fatalf("%s: screenshot %v: %v", backend, img.Bounds(), err)
		}
	}
}
