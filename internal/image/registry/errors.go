package registry

import (
	"errors"
	"net/http"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// classify sorts a registry error by the registry's answer (its HTTP status
// and error codes), never by the message's text: a message quotes the
// registry's URL, whose port may well contain "404".
func classify(err error, ref, host string) error {
	var e *errdefs.Error
	if errors.As(err, &e) {
		return err
	}
	var te *transport.Error
	if errors.As(err, &te) {
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return errdefs.NotFound("image %s not found at %s: %v", ref, host, err)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return errdefs.Wrap(api.CodePermissionDenied, err, "registry %s refused %s (credentials missing or wrong)", host, ref)
			}
		}
		switch te.StatusCode {
		case http.StatusNotFound:
			return errdefs.NotFound("image %s not found at %s: %v", ref, host, err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return errdefs.Wrap(api.CodePermissionDenied, err, "registry %s refused %s (credentials missing or wrong)", host, ref)
		}
	}
	return errdefs.Wrap(api.CodeUnavailable, err, "registry %s unreachable for %s", host, ref)
}

// Classify classifies an error reading from a registry (a blob's read).
func Classify(err error, what string) error { return classify(err, what, "the registry") }
