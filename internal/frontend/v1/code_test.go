package v1_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

// code:run refuses bad input with /v1 errors before anything starts, and a
// sandbox whose image cannot run the interpreter gets a clear 503, not a hang.
func TestRunCodeErrors(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	path := "/v1/sandboxes/" + sb.ID + "/code:run"
	for _, c := range []struct {
		name, path, body string
		status           int
		code             api.Code
		msg              string
	}{
		{"unknown sandbox", "/v1/sandboxes/sb-0000000000000000/code:run", `{"code":"1"}`, 404, api.CodeNotFound, ""},
		{"context and language", path, `{"code":"1","language":"python","context":"c"}`, 400, api.CodeInvalidArgument, "not both"},
		{"negative timeout", path, `{"code":"1","timeout":-1}`, 400, api.CodeInvalidArgument, "timeout"},
		{"unknown field", path, `{"code":"1","lang":"python"}`, 400, api.CodeInvalidArgument, ""},
		// The mock node's processes are host processes: the service's file is
		// not where the command looks for it, so it exits before serving.
		{"no interpreter", path, `{"code":"1"}`, 503, api.CodeUnavailable, "code-interpreter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.do("POST", c.path, strings.NewReader(c.body))
			got := wantError(t, resp, body, c.status, c.code)
			t.Logf("%d %s", resp.StatusCode, got.Message)
			if !strings.Contains(got.Message, c.msg) {
				t.Errorf("message %q does not name %q", got.Message, c.msg)
			}
		})
	}
	if resp, _ := e.do("GET", "/v1/sandboxes/"+sb.ID, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the sandbox is gone after refused cells: %d", resp.StatusCode)
	}
}

// The code context routes refuse an unknown sandbox and a malformed body with
// /v1 errors, and answer a sandbox whose image cannot run the interpreter with
// a clear 503 naming it.
func TestCodeContextErrors(t *testing.T) {
	e := newEnv(t, v1.Options{})
	sb := e.create()
	base := "/v1/sandboxes/" + sb.ID + "/code/contexts"
	gone := "/v1/sandboxes/sb-0000000000000000/code/contexts"
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     api.Code
		msg                      string
	}{
		{"list, unknown sandbox", "GET", gone, "", 404, api.CodeNotFound, ""},
		{"create, unknown sandbox", "POST", gone, `{}`, 404, api.CodeNotFound, ""},
		{"restart, unknown sandbox", "POST", gone + "/c1/restart", "", 404, api.CodeNotFound, ""},
		{"delete, unknown sandbox", "DELETE", gone + "/c1", "", 404, api.CodeNotFound, ""},
		{"create, unknown field", "POST", base, `{"lang":"python"}`, 400, api.CodeInvalidArgument, "lang"},
		{"list, no interpreter", "GET", base, "", 503, api.CodeUnavailable, "code-interpreter"},
		{"create, no interpreter", "POST", base, "", 503, api.CodeUnavailable, "code-interpreter"},
		{"delete, no interpreter", "DELETE", base + "/c1", "", 503, api.CodeUnavailable, "code-interpreter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			resp, got := e.do(c.method, c.path, body)
			ae := wantError(t, resp, got, c.status, c.code)
			if !strings.Contains(ae.Message, c.msg) {
				t.Errorf("message %q does not name %q", ae.Message, c.msg)
			}
		})
	}
}
