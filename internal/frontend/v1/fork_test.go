package v1_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestForkCommitNotImplemented: a sandbox whose backend cannot fork or commit
// (the mock driver claims neither) answers 501 not_implemented on both routes.
func TestForkCommitNotImplemented(t *testing.T) {
	e := newEnv(t, v1.Options{})
	base := "/v1/sandboxes/" + e.create().ID
	for path, req := range map[string]string{base + "/fork": `{"count": 2}`, base + "/commit": `{"name": "env"}`} {
		resp, body := e.do(http.MethodPost, path, strings.NewReader(req))
		var ae struct{ Error api.Error }
		_ = json.Unmarshal(body, &ae)
		if resp.StatusCode != http.StatusNotImplemented || ae.Error.Code != api.CodeNotImplemented {
			t.Errorf("POST %s: %d %s", path, resp.StatusCode, body)
		}
	}
}
