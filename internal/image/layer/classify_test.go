package layer

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestClassifyRemote: a registry error is sorted by the registry's answer,
// never by digits in the URL it quotes (a registry on port 40475 that
// refused the connection was once reported as "not found").
func TestClassifyRemote(t *testing.T) {
	refused := fmt.Errorf(`Get "https://127.0.0.1:40475/v2/": dial tcp 127.0.0.1:40475: connect: connection refused`)
	for _, c := range []struct {
		name  string
		err   error
		code  api.Code
		infra bool
	}{
		{"refused on a port with 404 in it", refused, "", true},
		{"404", &transport.Error{StatusCode: http.StatusNotFound}, api.CodeNotFound, false},
		{"manifest unknown", &transport.Error{StatusCode: http.StatusBadRequest,
			Errors: []transport.Diagnostic{{Code: transport.ManifestUnknownErrorCode}}}, api.CodeNotFound, false},
		{"401", fmt.Errorf("wrapped: %w", &transport.Error{StatusCode: http.StatusUnauthorized}), api.CodeUnauthorized, false},
		{"denied", &transport.Error{StatusCode: http.StatusBadRequest,
			Errors: []transport.Diagnostic{{Code: transport.DeniedErrorCode}}}, api.CodeUnauthorized, false},
		{"500", &transport.Error{StatusCode: http.StatusInternalServerError}, "", true},
		{"other", errors.New("unexpected EOF"), "", true},
	} {
		got := classifyRemote(c.err, "127.0.0.1:40475/dsec/flat:v1")
		ae := errdefs.ToAPI(got)
		if c.infra {
			if !ae.Infrastructure {
				t.Errorf("%s: %v (%+v), want an infrastructure error", c.name, got, ae)
			}
			continue
		}
		if !errdefs.Is(got, c.code) {
			t.Errorf("%s: %v (%s), want %s", c.name, got, errdefs.CodeOf(got), c.code)
		}
	}
}
