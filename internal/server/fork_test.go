package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/server"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestForkCommitNotImplemented: a session service without session.Forker and
// session.Committer (the fake node) answers 501 not_implemented on both routes.
func TestForkCommitNotImplemented(t *testing.T) {
	e := newEnv(t, server.Options{})
	for _, path := range []string{"/v1/sandboxes/sb-x/fork", "/v1/sandboxes/sb-x/commit"} {
		resp, body := e.do(http.MethodPost, path, strings.NewReader(`{"count": 2, "name": "env"}`))
		var ae struct{ Error api.Error }
		_ = json.Unmarshal(body, &ae)
		if resp.StatusCode != http.StatusNotImplemented || ae.Error.Code != api.CodeNotImplemented {
			t.Errorf("POST %s: %d %s", path, resp.StatusCode, body)
		}
	}
}
