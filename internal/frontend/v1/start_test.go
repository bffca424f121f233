package v1_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
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

// TestCreateStartKeepAlive: a create that waits for its start command past
// the keep-alive interval keeps its connection busy (200 with
// X-Dsec-Keepalive), and the Go client reads the sandbox, or the late
// start_failed, from it.
func TestCreateStartKeepAlive(t *testing.T) {
	e := newEnv(t, v1.Options{KeepAlive: 50 * time.Millisecond})
	mark := filepath.Join(t.TempDir(), "ready") // the mock's processes are the host's
	resp, b := e.do("POST", "/v1/sandboxes", strings.NewReader(`{"start_cmd":"sleep 0.4; touch `+mark+`; exec sleep 30","ready_cmd":"test -e `+mark+`","ready_timeout_ms":20000}`))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.KeepAliveHeader) == "" || !strings.HasPrefix(string(b), " ") {
		t.Errorf("a create waiting past the keep-alive: %d %q %q", resp.StatusCode, resp.Header.Get(api.KeepAliveHeader), b)
	}
	cl := client.New(e.srv.URL, token)
	sb, err := cl.Create(context.Background(), api.CreateSandboxRequest{StartCmd: "sleep 0.3; exec sleep 30", ReadyCmd: "sleep 0.2", ReadyTimeoutMs: 20_000})
	if err != nil || sb.Start == nil || sb.Start.State != api.StartReady {
		t.Fatalf("Go client, late answer: %+v, %v", sb.Start, err)
	}
	_, err = cl.Create(context.Background(), api.CreateSandboxRequest{StartCmd: "sleep 0.3; echo late failure >&2; exit 9", ReadyCmd: "false"})
	ae, ok := api.AsError(err)
	if !ok || ae.Code != api.CodeStartFailed || ae.Status != http.StatusUnprocessableEntity || !strings.Contains(ae.Message, "late failure") {
		t.Errorf("Go client, late start_failed: %v", err)
	}
}
