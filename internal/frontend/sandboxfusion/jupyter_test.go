package sandboxfusion

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeSandboxes is one sandbox at a time with an in-memory file system; exec
// answers what run returns (run may write files, as the driver would).
type fakeSandboxes struct {
	mu        sync.Mutex
	create    []api.CreateSandboxRequest
	exec      []api.ExecRequest
	deleted   []string
	files     map[string][]byte
	createErr error
	run       func(f *fakeSandboxes, req api.ExecRequest) api.ExecResult
}

func (f *fakeSandboxes) Create(_ context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.create = append(f.create, req)
	if f.createErr != nil {
		return api.Sandbox{}, f.createErr
	}
	f.files = map[string][]byte{}
	return api.Sandbox{ID: "sb1"}, nil
}

func (f *fakeSandboxes) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *fakeSandboxes) Exec(_ context.Context, _ string, req api.ExecRequest) (api.ExecResult, error) {
	f.mu.Lock()
	f.exec = append(f.exec, req)
	f.mu.Unlock()
	return f.run(f, req), nil
}

func (f *fakeSandboxes) FS(context.Context, string) (session.FS, error) { return memFS{f}, nil }

// memFS serves the calls /run_jupyter makes; the others are not used.
type memFS struct{ f *fakeSandboxes }

var _ session.FS = memFS{}

func (m memFS) Open(_ context.Context, p string) (io.ReadCloser, api.FileInfo, error) {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	b, ok := m.f.files[p]
	if !ok {
		return nil, api.FileInfo{}, errdefs.New(api.CodeNotFound, "%s: no such file", p)
	}
	return io.NopCloser(bytes.NewReader(b)), api.FileInfo{Path: p, Size: int64(len(b)), Type: "file"}, nil
}

func (m memFS) WriteFile(_ context.Context, p string, _ os.FileMode, r io.Reader, _ int64) (api.FileInfo, error) {
	b, err := io.ReadAll(r)
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	m.f.files[p] = b
	return api.FileInfo{Path: p, Size: int64(len(b)), Type: "file"}, err
}

func (m memFS) Mkdir(context.Context, string, os.FileMode, bool) (api.FileInfo, error) {
	return api.FileInfo{Type: "dir"}, nil
}
func (m memFS) Stat(context.Context, string) (api.FileInfo, error)   { panic("unused") }
func (m memFS) List(context.Context, string) ([]api.FileInfo, error) { panic("unused") }
func (m memFS) Remove(context.Context, string, bool) error           { panic("unused") }
func (m memFS) Rename(context.Context, string, string) error         { panic("unused") }
func (m memFS) WriteTar(context.Context, string, io.Writer) error    { panic("unused") }
func (m memFS) ExtractTar(context.Context, string, io.Reader) error  { panic("unused") }
func (m memFS) Close() error                                         { return nil }

// driverWrites answers like a driver that finished and wrote out.
func driverWrites(out string, extra map[string]string) func(*fakeSandboxes, api.ExecRequest) api.ExecResult {
	return func(f *fakeSandboxes, _ api.ExecRequest) api.ExecResult {
		f.files[jupyterOutput] = []byte(out)
		for p, c := range extra {
			f.files[p] = []byte(c)
		}
		return api.ExecResult{Stdout: "kernel python3 started\n", DurationMs: 1500}
	}
}

func TestRunJupyterMapsRequestAndCells(t *testing.T) {
	sbs := &fakeSandboxes{run: driverWrites(`{"status":"Finished","cells":[
		{"stdout":"","stderr":"","display":[{"text/plain":"'hello'"}],"error":[]},
		{"stdout":"hi\n","stderr":"","display":null,"error":null}]}`,
		map[string]string{"/home/user/out/r.txt": "result"})}
	h := New(&fakeFnCall{res: accepted}, Options{Sandboxes: sbs})
	code, out := post(t, h, "/run_jupyter", `{"cells":["a = 'hello'\na","print('hi')"],"total_timeout":20,"memory_limit_MB":512,
		"files":{"data/in.txt":"aGVsbG8=","skip":null},"fetch_files":["out/r.txt","absent.txt"],"kernel":"python3"}`)
	if code != 200 || out["status"] != StatusSuccess || out["message"] != "" {
		t.Fatalf("%d %v", code, out)
	}
	if d := out["driver"].(map[string]any); d["status"] != CmdFinished || d["return_code"] != 0.0 || d["execution_time"] != 1.5 {
		t.Errorf("driver %v", d)
	}
	cells := out["cells"].([]any)
	if len(cells) != 2 {
		t.Fatalf("cells %v", cells)
	}
	c1 := cells[1].(map[string]any)
	if c1["stdout"] != "hi\n" || c1["display"] == nil || c1["error"] == nil { // lists, never null
		t.Errorf("cell 1 %v", c1)
	}
	if d := cells[0].(map[string]any)["display"].([]any); d[0].(map[string]any)["text/plain"] != "'hello'" {
		t.Errorf("cell 0 %v", cells[0])
	}
	files := out["files"].(map[string]any)
	if files["out/r.txt"] != "cmVzdWx0" || len(files) != 1 {
		t.Errorf("files %v", files)
	}
	if _, ok := out["executor_pod_name"]; !ok {
		t.Errorf("no executor_pod_name: %v", out)
	}

	cr := sbs.create[0]
	if cr.Image != DefaultJupyterImage || cr.MemoryBytes != 512<<20 || cr.Network != nil || cr.TTLSeconds < 30 {
		t.Errorf("create %+v", cr)
	}
	if string(sbs.files["/home/user/data/in.txt"]) != "hello" || !bytes.Equal(sbs.files[jupyterDriver], jupyterDriverPy) {
		t.Errorf("files written: %v", sbs.files)
	}
	ex := sbs.exec[0]
	var in struct {
		Kernel string   `json:"kernel"`
		Cells  []string `json:"cells"`
		Output string   `json:"output"`
	}
	if err := json.Unmarshal([]byte(ex.Stdin), &in); err != nil || in.Kernel != "python3" || len(in.Cells) != 2 || in.Output != jupyterOutput {
		t.Errorf("driver input %q: %v", ex.Stdin, err)
	}
	if ex.TimeoutMs != 30_000 || ex.Cwd != jupyterWorkDir { // total_timeout + 10 s, as SandboxFusion's driver
		t.Errorf("exec %+v", ex)
	}
	if len(sbs.deleted) != 1 {
		t.Errorf("sandbox deleted %d times", len(sbs.deleted))
	}
}

// The driver's failures are SandboxFusion's: status Failed, the driver's run,
// no cells; the sandbox is deleted either way.
func TestRunJupyterDriverFailures(t *testing.T) {
	for name, c := range map[string]struct {
		res        api.ExecResult
		status     string
		returnCode any
	}{
		"timeout":       {api.ExecResult{TimedOut: true, ExitCode: -1, Signal: "SIGKILL", DurationMs: 11_000}, CmdTimeLimit, nil},
		"exit 1":        {api.ExecResult{ExitCode: 1, Stderr: "Traceback ...\n"}, CmdFinished, 1.0},
		"killed (OOM)":  {api.ExecResult{ExitCode: -1, Signal: "SIGKILL", OOMKilled: true}, CmdFinished, -9.0},
		"did not start": {api.ExecResult{ExitCode: 127, Error: "python3: not found"}, CmdError, nil},
	} {
		t.Run(name, func(t *testing.T) {
			sbs := &fakeSandboxes{run: func(*fakeSandboxes, api.ExecRequest) api.ExecResult { return c.res }}
			h := New(&fakeFnCall{res: accepted}, Options{Sandboxes: sbs})
			code, out := post(t, h, "/run_jupyter", `{"cells":["print(1)"],"total_timeout":1}`)
			if code != 200 || out["status"] != StatusFailed || len(out["cells"].([]any)) != 0 {
				t.Fatalf("%d %v", code, out)
			}
			if d := out["driver"].(map[string]any); d["status"] != c.status || d["return_code"] != c.returnCode {
				t.Errorf("driver %v", d)
			}
			if len(sbs.deleted) != 1 {
				t.Errorf("sandbox deleted %d times", len(sbs.deleted))
			}
		})
	}
}

func TestRunJupyterErrors(t *testing.T) {
	sbs := &fakeSandboxes{run: driverWrites(`{"status":"Finished","cells":[]}`, nil)}
	h := New(&fakeFnCall{res: accepted}, Options{Sandboxes: sbs})
	for _, body := range []string{
		`{"kernel":"python3"}`,
		`{"cells":["1"],"kernel":"julia"}`,
		`{"cells":["1"],"total_timeout":0}`,
		`{"cells":["1"],"total_timeout":7200}`,
		`{"cells":["1"],"cell_timeout":-1}`,
		`{"cells":["1"],"files":{"../x":"eA=="}}`,
		`{"cells":["1"],"files":{"x":"not base64!"}}`,
		`{"cells":["1"],"fetch_files":["/etc/passwd"]}`,
		`{"cells":"print(1)"}`,
	} {
		code, out := post(t, h, "/run_jupyter", body)
		if code != 400 || out["code"] != string(api.CodeInvalidArgument) || out["detail"] == "" {
			t.Errorf("%s: %d %v", body, code, out)
		}
	}
	if len(sbs.create) != 0 {
		t.Errorf("%d refused requests created a sandbox", len(sbs.create))
	}

	// No room for a sandbox: 504 with retryable, as /run_code's.
	full := &fakeSandboxes{createErr: errdefs.New(api.CodeResourceExhausted, "node is full")}
	code, out := post(t, New(&fakeFnCall{res: accepted}, Options{Sandboxes: full}), "/run_jupyter", `{"cells":["1"]}`)
	if code != 504 || out["retryable"] != true || !strings.Contains(out["detail"].(string), "node is full") {
		t.Errorf("create refused: %d %v", code, out)
	}

	// Without a sandbox service the route is not served.
	code, out = post(t, New(&fakeFnCall{res: accepted}, Options{}), "/run_jupyter", `{"cells":["1"]}`)
	if code != 501 || out["code"] != string(api.CodeNotImplemented) {
		t.Errorf("no sandboxes: %d %v", code, out)
	}
}
