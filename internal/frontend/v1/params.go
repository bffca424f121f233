package v1

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// queryPath returns the required "path" query parameter.
func queryPath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", errdefs.Invalid("query parameter \"path\" is required")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Invalid("path contains a NUL byte")
	}
	return p, nil
}

// queryInt returns a non-negative integer query parameter, or def when absent.
func queryInt(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errdefs.Invalid("query parameter %q must be a non-negative integer, got %q", name, v)
	}
	return n, nil
}

// queryBool returns a boolean query parameter, false when absent.
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Invalid("query parameter %q must be a boolean, got %q", name, v)
	}
	return b, nil
}

// parseMode parses an octal permission mode ("0644", "755"); empty means def.
func parseMode(v string, def uint32) (uint32, error) {
	if v == "" {
		return def, nil
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, errdefs.Invalid("mode must be octal permission bits (0 to 07777), got %q", v)
	}
	return uint32(m), nil
}
