package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Signed file URLs (E2B's v1 signature): a secured sandbox's uploadUrl and
// downloadUrl carry ?signature=v1_BASE64(SHA-256("path:operation:user:token"
// [":expiration"])) with the sandbox's envd access token as the key, and
// ?signature_expiration= (Unix seconds) when they expire. Such a URL is the
// whole credential: it may come without E2b-Sandbox-Id (a browser, curl), so
// the sandbox is the one whose token makes the signature.

// fileSignature is the v1 signature of an operation ("read" or "write") on
// path as user, with token; expiration is "" for a URL that never expires.
func fileSignature(path, operation, user, token, expiration string) string {
	raw := path + ":" + operation + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// isSigned says whether r is a /files request carrying a signature.
func isSigned(r *http.Request) bool {
	return r.URL.Path == "/files" && r.URL.Query().Has("signature")
}

// signedSandbox checks a signed /files request and returns the sandbox it is
// for: the E2b-Sandbox-Id header's, else the one (among those that run) whose
// access token signed it. Errors are unauthenticated.
func (h *Handler) signedSandbox(ctx context.Context, r *http.Request) (string, error) {
	q := r.URL.Query()
	var op string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		op = "read"
	case http.MethodPost:
		op = "write"
	default:
		return "", errdefs.New(api.CodeUnauthorized, "a signed URL allows only GET and POST")
	}
	sig, exp := q.Get("signature"), q.Get("signature_expiration")
	if !strings.HasPrefix(sig, "v1_") {
		return "", errdefs.New(api.CodeUnauthorized, "unsupported signature version")
	}
	if exp != "" {
		at, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return "", errdefs.New(api.CodeUnauthorized, "invalid signature expiration")
		}
		if time.Now().Unix() > at {
			return "", errdefs.New(api.CodeUnauthorized, "signature is already expired")
		}
	}
	matches := func(id string) bool {
		want := fileSignature(q.Get("path"), op, q.Get("username"), h.accessToken(id), exp)
		return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
	}
	if id := r.Header.Get(SandboxIDHeader); id != "" {
		if matches(id) {
			return id, nil
		}
		return "", errdefs.New(api.CodeUnauthorized, "invalid signature")
	}
	all, err := h.svc.List(session.WithoutStep(ctx))
	if err != nil {
		return "", err
	}
	for _, sb := range all {
		if sb.State == api.StateRunning || sb.State == api.StatePaused {
			if matches(sb.ID) {
				return sb.ID, nil
			}
		}
	}
	return "", errdefs.New(api.CodeUnauthorized, "invalid signature")
}
