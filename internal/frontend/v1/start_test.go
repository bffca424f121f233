package v1_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestCreateStart: /v1 create and batch create carry start commands and
// readiness checks to the node. A start that fails is a 422 start_failed
// with the command's output, its sandbox listed with start.state failed; a
// malformed start field is a 400 naming it and creates nothing.
func TestCreateStart(t *testing.T) {
	e := newEnv(t, v1.Options{})
	resp, b := e.do("POST", "/v1/sandboxes", strings.NewReader(`{"start_cmd":"exec sleep 30","ready_cmd":"true","ready_timeout_ms":20000}`))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create with a start command: %d %s", resp.StatusCode, b)
	}
	var sb api.Sandbox
	mustJSON(t, b, &sb)
	if sb.Start == nil || sb.Start.State != api.StartReady || sb.Start.ProcessID == "" {
		t.Fatalf("start %+v, want ready", sb.Start)
	}
	resp, b = e.do("GET", "/v1/sandboxes/"+sb.ID+"/processes/"+sb.Start.ProcessID, nil)
	var p api.Process
	mustJSON(t, b, &p)
	if resp.StatusCode != http.StatusOK || !p.Running || p.Labels[api.LabelStart] != "start_cmd" {
		t.Errorf("the start process: %d %s", resp.StatusCode, b)
	}

	resp, b = e.do("POST", "/v1/sandboxes", strings.NewReader(`{"start_cmd":"echo no database >&2; exit 1","ready_cmd":"false"}`))
	ae := wantError(t, resp, b, http.StatusUnprocessableEntity, api.CodeStartFailed)
	if ae.Infrastructure || !strings.Contains(ae.Message, "exit code 1") || !strings.Contains(ae.Message, "no database") {
		t.Errorf("start_failed: %+v", ae)
	}
	resp, b = e.do("GET", "/v1/sandboxes", nil)
	var list api.ListSandboxesResponse
	mustJSON(t, b, &list)
	failed := 0
	for _, s := range list.Sandboxes {
		if s.Start != nil && s.Start.State == api.StartFailed && strings.Contains(ae.Message, s.ID) {
			failed++
		}
	}
	if resp.StatusCode != http.StatusOK || len(list.Sandboxes) != 2 || failed != 1 {
		t.Errorf("list after a failed start: %s", b)
	}

	n := e.count()
	for field, body := range map[string]string{
		"start_cmd":        `{"start_cmd":"   "}`,
		"ready_port":       `{"start_cmd":"sleep 1","ready_port":65536}`,
		"ready_timeout_ms": `{"start_cmd":"sleep 1","ready_cmd":"true","ready_timeout_ms":600001}`,
		"entrypoint":       `{"start_cmd":"sleep 1","entrypoint":true}`,
	} {
		resp, b := e.do("POST", "/v1/sandboxes", strings.NewReader(body))
		if ae := wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument); !strings.Contains(ae.Message, field) {
			t.Errorf("%s: message %q does not name it", body, ae.Message)
		}
	}
	resp, b = e.do("POST", "/v1/sandboxes:batch", strings.NewReader(`{"sandboxes":[{},{"start_cmd":"x","ready_port":0,"ready_timeout_ms":-1}]}`))
	if ae := wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument); !strings.Contains(ae.Message, "sandboxes[1]: ready_timeout_ms") {
		t.Errorf("batch: %q", ae.Message)
	}
	if got := e.count(); got != n {
		t.Errorf("refused creates made %d sandboxes", got-n)
	}

	resp, b = e.do("POST", "/v1/sandboxes:batch", strings.NewReader(`{"sandboxes":[{"start_cmd":"exec sleep 30","ready_cmd":"true"},{"start_cmd":"exec sleep 30","ready_cmd":"true"}]}`))
	var br api.BatchCreateResponse
	mustJSON(t, b, &br)
	if resp.StatusCode != http.StatusCreated || len(br.Sandboxes) != 2 || br.Sandboxes[1].Start == nil || br.Sandboxes[1].Start.State != api.StartReady {
		t.Errorf("batch with start commands: %d %s", resp.StatusCode, b)
	}
}
