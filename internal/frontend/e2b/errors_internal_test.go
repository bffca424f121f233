package e2b

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestRefusalRetryAfter: a control-plane refusal for lack of room is a 429
// with an integer Retry-After (what E2B's SDK needs to wait and retry): the
// refusal's own delay rounded up, else 1 s; other errors have none.
func TestRefusalRetryAfter(t *testing.T) {
	full := errdefs.New(api.CodeResourceExhausted, "node is at its limit")
	timed := &errdefs.Error{Code: api.CodeResourceExhausted, Msg: "admission", RetryAfter: 1500 * time.Millisecond}
	for _, c := range []struct {
		err    error
		status int
		want   string
	}{
		{full, http.StatusTooManyRequests, "1"},
		{timed, http.StatusTooManyRequests, "2"},
		{errdefs.NotFound("sandbox %q not found", "x"), http.StatusNotFound, ""},
	} {
		w := httptest.NewRecorder()
		(&Handler{}).writeErr(w, httptest.NewRequest(http.MethodPost, "/sandboxes", nil), c.err)
		if w.Code != c.status || w.Header().Get("Retry-After") != c.want {
			t.Errorf("%v: %d, Retry-After %q; want %d, %q", c.err, w.Code, w.Header().Get("Retry-After"), c.status, c.want)
		}
	}
}
