package sandboxfusion

import (
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// noGPUNode refuses a FnCall of device gpu as a node (or a cluster) without
// one does, and accepts the others.
func noGPUNode(req api.FnCallRequest) (api.FnCallResult, error) {
	if req.Device != "" {
		return api.FnCallResult{}, errdefs.New(api.CodeNotImplemented, "node n1 has no GPU for device %q", req.Device)
	}
	return accepted(req)
}

// TestGPULanguagesWithoutGPU: cuda and python_gpu are FnCalls of device gpu
// running SandboxFusion's commands on the request's files; where no node has
// a GPU the answer is a 200 with status SandboxError naming the language (as
// SandboxFusion reports a runner that cannot run), on /run_code and /submit.
func TestGPULanguagesWithoutGPU(t *testing.T) {
	f := &fakeFnCall{res: noGPUNode}
	h := New(f, Options{})
	for lang, cmd := range map[string]string{"cuda": "cmake .. && make -j 4", "python_gpu": "python3 compile.py"} {
		code, out := post(t, h, "/run_code", `{"code":"x","language":"`+lang+`","files":{"run.py":"cHJpbnQoMSk="}}`)
		msg, _ := out["message"].(string)
		if code != 200 || out["status"] != StatusSandboxError || !strings.Contains(msg, lang) || !strings.Contains(msg, "GPU") {
			t.Errorf("%s without a GPU: %d %v; want 200, SandboxError naming %s and the GPU", lang, code, out, lang)
		}
		if out["run_result"] != nil || out["compile_result"] != nil {
			t.Errorf("%s without a GPU: results %v, want none (nothing ran)", lang, out)
		}
		req := f.last(t)
		if req.Device != "gpu" || len(req.Cmd) != 3 || !strings.Contains(req.Cmd[2], cmd) || req.Files["run.py"] != "print(1)" {
			t.Errorf("%s: request %+v, want device gpu running %q on the files", lang, req, cmd)
		}
	}
	// /submit: every case a SandboxError, not accepted.
	body := `{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset","language":"cuda",
		"provided_data":{"test":[{"input":{"stdin":""},"output":{"stdout":"1"}}]}}}`
	code, out := post(t, h, "/submit", body)
	tests, _ := out["tests"].([]any)
	if code != 200 || out["accepted"] != false || len(tests) != 1 {
		t.Fatalf("/submit cuda without a GPU: %d %v", code, out)
	}
	exec := tests[0].(map[string]any)["exec_info"].(map[string]any)
	if exec["status"] != StatusSandboxError || !strings.Contains(exec["message"].(string), "cuda") {
		t.Errorf("/submit cuda without a GPU: exec_info %v", exec)
	}
	// A CPU language's not_implemented stays an error of dsec's (a 5xx).
	f.res = func(api.FnCallRequest) (api.FnCallResult, error) {
		return api.FnCallResult{}, errdefs.New(api.CodeNotImplemented, "FnCall is off")
	}
	if code, out := post(t, h, "/run_code", `{"code":"print(1)","language":"python"}`); code != 501 {
		t.Errorf("python on a node without FnCall: %d %v, want 501", code, out)
	}
}

// TestGPULanguagesOnGPU: where a node takes the call its run is the answer.
func TestGPULanguagesOnGPU(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	code, out := post(t, h, "/run_code", `{"code":"","language":"python_gpu","stdin":"ok"}`)
	if code != 200 || out["status"] != StatusSuccess || out["run_result"].(map[string]any)["stdout"] != "OK" {
		t.Errorf("python_gpu on a GPU node: %d %v", code, out)
	}
}
