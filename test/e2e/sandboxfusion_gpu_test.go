package e2e

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSandboxFusionGPU: on `dsec server`, SandboxFusion's cuda and
// python_gpu are answered a 200 SandboxError naming the language and the
// missing GPU on a node without one, and run (SandboxFusion's python_gpu
// commands: compile.py, then run.py) on a node that advertises one, here a
// directory with a fake nvidia0 device node as --gpu-dev-dir.
func TestSandboxFusionGPU(t *testing.T) {
	needJudge(t)
	files := map[string]any{
		"compile.py": base64.StdEncoding.EncodeToString([]byte("print('compiled')\n")),
		"run.py":     base64.StdEncoding.EncodeToString([]byte("print(input()[::-1])\n")),
	}
	call := func(lang string) map[string]any {
		p := verlPayload("", "olleh", lang, 10)
		p["files"] = files
		return p
	}

	noGPU := startNode(t, "--gpu-dev-dir", t.TempDir())
	for _, lang := range []string{"cuda", "python_gpu"} {
		code, out := sfPost(t, "http://"+noGPU.addr+"/run_code", noGPU.token, call(lang))
		msg, _ := out["message"].(string)
		if code != 200 || out["status"] != "SandboxError" || !strings.Contains(msg, lang) || !strings.Contains(msg, "GPU") {
			t.Errorf("%s on a node without a GPU: %d %v; want 200 SandboxError naming %s and the GPU", lang, code, out, lang)
		}
	}

	dev := t.TempDir()
	if err := os.WriteFile(filepath.Join(dev, "nvidia0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	gpu := startNode(t, "--gpu-dev-dir", dev)
	code, out := sfPost(t, "http://"+gpu.addr+"/run_code", gpu.token, call("python_gpu"))
	if code != 200 || out["status"] != "Success" {
		t.Fatalf("python_gpu on a node with a GPU: %d %v", code, out)
	}
	if run := out["run_result"].(map[string]any); run["stdout"] != "hello\n" || !strings.Contains(run["stderr"].(string), "compiled") {
		t.Errorf("python_gpu run_result %v, want run.py's stdout and compile.py's output on stderr", run)
	}
}
