package v1_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestForkCommitNotImplemented: a session service without fork and commit (the
// fake node, whose session.Unimplemented answers them) answers 501
// not_implemented on both routes.
func TestForkCommitNotImplemented(t *testing.T) {
	e := newEnv(t, v1.Options{})
	for path, req := range map[string]string{"/v1/sandboxes/sb-x/fork": `{"count": 2}`, "/v1/sandboxes/sb-x/commit": `{"name": "env"}`} {
		resp, body := e.do(http.MethodPost, path, strings.NewReader(req))
		var ae struct{ Error api.Error }
		_ = json.Unmarshal(body, &ae)
		if resp.StatusCode != http.StatusNotImplemented || ae.Error.Code != api.CodeNotImplemented {
			t.Errorf("POST %s: %d %s", path, resp.StatusCode, body)
		}
	}
}
