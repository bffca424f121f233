package sandboxfusion

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeFnCall answers every call with its next result and records the requests.
type fakeFnCall struct {
	mu   sync.Mutex
	reqs []api.FnCallRequest
	res  func(req api.FnCallRequest) (api.FnCallResult, error)
}

func (f *fakeFnCall) FnCall(_ context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	return f.res(req)
}

func (f *fakeFnCall) last(t *testing.T) api.FnCallRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("no FnCall was made")
	}
	return f.reqs[len(f.reqs)-1]
}

// accepted answers each test with stdout = its stdin upper-cased.
func accepted(req api.FnCallRequest) (api.FnCallResult, error) {
	res := api.FnCallResult{Verdict: api.VerdictAccepted}
	for _, t := range req.Tests {
		res.Tests = append(res.Tests, api.FnCallTestResult{Verdict: api.VerdictAccepted, WallTimeMs: 12, Stdout: strings.ToUpper(t.Stdin)})
	}
	return res, nil
}

func post(t *testing.T, h http.Handler, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s: answer is not a JSON object: %v: %s", path, err, rec.Body)
	}
	return rec.Code, out
}

func TestRunCodeMapsRequest(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	code, out := post(t, h, "/run_code", `{"code":"print(input())","language":"python","stdin":"hi","run_timeout":2.5,
		"memory_limit_MB":128,"files":{"data/x.txt":"aGVsbG8=","skip":null},"fetch_files":[],"unknown_field":1}`)
	if code != 200 || out["status"] != StatusSuccess {
		t.Fatalf("%d %v", code, out)
	}
	req := f.last(t)
	if req.Language != api.LangPython3 || req.Files["main.py"] != "print(input())" || req.Files["data/x.txt"] != "hello" ||
		len(req.Files) != 2 || len(req.Tests) != 1 || req.Tests[0].Stdin != "hi" {
		t.Errorf("request %+v", req)
	}
	if req.Limits.CPUTimeMs != 2500 || req.Limits.WallTimeMs != 2500 || req.Limits.MemoryBytes != 128<<20 {
		t.Errorf("limits %+v", req.Limits)
	}
	run := out["run_result"].(map[string]any)
	if run["status"] != CmdFinished || run["return_code"] != 0.0 || run["stdout"] != "HI" || run["execution_time"] != 0.012 {
		t.Errorf("run_result %v", run)
	}
	if out["compile_result"] != nil || out["message"] != "" {
		t.Errorf("compile_result/message %v", out)
	}
	// Defaults: 10 s, the handler's memory, empty stdin.
	post(t, h, "/run_code", `{"code":"echo","language":"bash"}`)
	req = f.last(t)
	if req.Language != api.LangBash || req.Files["main.sh"] != "echo" || req.Limits.WallTimeMs != 10000 ||
		req.Limits.MemoryBytes != DefaultMemoryBytes || req.Tests[0].Stdin != "" {
		t.Errorf("defaults %+v", req)
	}
	for lang, want := range map[string]string{"cpp": api.LangCPP, "go": api.LangGo} {
		post(t, h, "/run_code", `{"code":"x","language":"`+lang+`"}`)
		if got := f.last(t).Language; got != want {
			t.Errorf("%s ran as %s", lang, got)
		}
	}
}

func TestRunCodeStatuses(t *testing.T) {
	cases := []struct {
		name       string
		res        api.FnCallResult
		status     string
		runStatus  string
		returnCode any
	}{
		{"nonzero exit", api.FnCallResult{Verdict: api.VerdictRuntimeError, Tests: []api.FnCallTestResult{{Verdict: api.VerdictRuntimeError, ExitCode: 3}}}, StatusFailed, CmdFinished, 3.0},
		{"signal", api.FnCallResult{Verdict: api.VerdictRuntimeError, Tests: []api.FnCallTestResult{{Verdict: api.VerdictRuntimeError, ExitCode: -1, Signal: "SIGSEGV"}}}, StatusFailed, CmdFinished, -11.0},
		{"memory", api.FnCallResult{Verdict: api.VerdictMemoryLimit, Tests: []api.FnCallTestResult{{Verdict: api.VerdictMemoryLimit, ExitCode: -1, Signal: "SIGKILL"}}}, StatusFailed, CmdFinished, -9.0},
		{"output limit without status", api.FnCallResult{Verdict: api.VerdictOutputLimit, Tests: []api.FnCallTestResult{{Verdict: api.VerdictOutputLimit}}}, StatusFailed, CmdFinished, -9.0},
		{"timeout", api.FnCallResult{Verdict: api.VerdictTimeLimit, Tests: []api.FnCallTestResult{{Verdict: api.VerdictTimeLimit, TimeLimit: "wall"}}}, StatusFailed, CmdTimeLimit, nil},
		{"system error", api.FnCallResult{Verdict: api.VerdictSystemError, Tests: []api.FnCallTestResult{{Verdict: api.VerdictSystemError, Message: "zygote died"}}}, StatusSandboxError, CmdError, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := New(&fakeFnCall{res: func(api.FnCallRequest) (api.FnCallResult, error) { return c.res, nil }}, Options{})
			code, out := post(t, h, "/run_code", `{"code":"x","language":"python"}`)
			if code != 200 || out["status"] != c.status {
				t.Fatalf("%d %v", code, out)
			}
			run := out["run_result"].(map[string]any)
			if run["status"] != c.runStatus || run["return_code"] != c.returnCode {
				t.Errorf("run_result %v", run)
			}
			if c.status == StatusSandboxError && !strings.Contains(out["message"].(string), "zygote died") {
				t.Errorf("message %q", out["message"])
			}
		})
	}
}

func TestRunCodeCompileError(t *testing.T) {
	h := New(&fakeFnCall{res: func(api.FnCallRequest) (api.FnCallResult, error) {
		return api.FnCallResult{Verdict: api.VerdictCompileError, Tests: []api.FnCallTestResult{},
			Compile: &api.FnCallCompile{Verdict: api.VerdictCompileError, ExitCode: 1, Output: "main.cpp:1: error", WallTimeMs: 300}}, nil
	}}, Options{})
	code, out := post(t, h, "/run_code", `{"code":"int main(","language":"cpp"}`)
	if code != 200 || out["status"] != StatusFailed || out["run_result"] != nil {
		t.Fatalf("%d %v", code, out)
	}
	c := out["compile_result"].(map[string]any)
	if c["status"] != CmdFinished || c["return_code"] != 1.0 || c["stderr"] != "main.cpp:1: error" || c["execution_time"] != 0.3 {
		t.Errorf("compile_result %v", c)
	}
}

func TestRunCodeBadInput(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{MaxBodyBytes: 4096})
	for _, c := range []struct{ body, code, want string }{
		{`{"code":"x","language":"swift"}`, "invalid_argument", "unsupported language"},
		{`{"code":"x","language":"cobol"}`, "invalid_argument", "unknown language"},
		{`{"code":"x"}`, "invalid_argument", "language is required"},
		{`{"language":"python"}`, "invalid_argument", "code is required"},
		{`{"code":"x","language":"python","fetch_files":["out.txt"]}`, "invalid_argument", "fetch_files"},
		{`{"code":"x","language":"python","run_timeout":0}`, "invalid_argument", "run_timeout"},
		{`{"code":"x","language":"python","compile_timeout":-1}`, "invalid_argument", "compile_timeout"},
		{`{"code":"x","language":"python","run_timeout":99999}`, "invalid_argument", "run_timeout"},
		{`{"code":"x","language":"python","files":{"a":"***"}}`, "invalid_argument", "not base64"},
		{`{"code":"x","language":"python","files":{"main.py":"eA=="}}`, "invalid_argument", "program's own file"},
		{`{"code":"x","language":"python","files":{"../etc/x":"eA=="}}`, "invalid_argument", "inside the work directory"},
		{`{"code":"x","language":"python","files":{"/etc/x":"eA=="}}`, "invalid_argument", "inside the work directory"},
		{`{"code":`, "invalid_argument", "not a valid JSON"},
		{`[1,2]`, "invalid_argument", "not a valid JSON"},
		{`{"code":"` + strings.Repeat("x", 5000) + `","language":"python"}`, "payload_too_large", "exceeds"},
	} {
		status, out := post(t, h, "/run_code", c.body)
		if status < 400 || status >= 500 || out["code"] != c.code || !strings.Contains(out["detail"].(string), c.want) {
			t.Errorf("%.60s: %d %v", c.body, status, out)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 0 {
		t.Errorf("%d bad requests reached FnCall", len(f.reqs))
	}
}

// dsec's own failures are answered so that verl retries them (a 504), never
// 429 or 503, which verl scores as a wrong answer.
func TestRunCodeInfrastructureErrorsAreRetryable(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   api.Code
	}{
		{errdefs.New(api.CodeResourceExhausted, "all slots busy"), 504, api.CodeDeadlineExceeded},
		{errdefs.New(api.CodeUnavailable, "judge image missing"), 504, api.CodeDeadlineExceeded},
		{errdefs.New(api.CodeNodeLost, "node gone"), 504, api.CodeNodeLost},
		{errdefs.Invalid("file name %q", "../x"), 400, api.CodeInvalidArgument},
	} {
		h := New(&fakeFnCall{res: func(api.FnCallRequest) (api.FnCallResult, error) { return api.FnCallResult{}, c.err }},
			Options{QueueWait: 20 * time.Millisecond})
		status, out := post(t, h, "/run_code", `{"code":"x","language":"python"}`)
		if status != c.status || out["code"] != string(c.code) {
			t.Errorf("%v: %d %v", c.err, status, out)
		}
		if status >= 500 && out["retryable"] != true {
			t.Errorf("%v: not retryable: %v", c.err, out)
		}
	}
}

func TestPing(t *testing.T) {
	rec := httptest.NewRecorder()
	New(&fakeFnCall{res: accepted}, Options{}).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/ping", nil))
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `"pong"` {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func submitBody(completion string, cases string, extra string) string {
	b, _ := json.Marshal(completion)
	return `{"dataset":"my_oj","id":7,"completion":` + string(b) + `,"config":{"dataset_type":"CommonOJDataset","language":"python",
		"provided_data":{"id":7,"test":` + cases + `},"extra":{` + extra + `}}}`
}

func TestSubmit(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	completion := "Here is my solution:\n```python\nprint(input().upper())\n```\nDone."
	cases := `[{"input":{"stdin":"abc"},"output":{"stdout":"ABC\n"}},{"input":{"stdin":"x y"},"output":{"stdout":"x Y"}}]`
	code, out := post(t, h, "/submit", submitBody(completion, cases, ""))
	if code != 200 || out["accepted"] != true || out["id"] != 7.0 || out["extracted_type"] != "fenced" ||
		out["extracted_code"] != "print(input().upper())" {
		t.Fatalf("%d %v", code, out)
	}
	tests := out["tests"].([]any)
	if len(tests) != 2 || tests[0].(map[string]any)["passed"] != true {
		t.Fatalf("tests %v", tests)
	}
	req := f.last(t)
	if len(req.Tests) != 2 || req.Tests[1].Stdin != "x y" || req.Limits.WallTimeMs != 20000 {
		t.Errorf("request %+v", req)
	}
	// A wrong answer stops the listing at the first failure, unless run_all_cases.
	bad := `[{"input":{"stdin":"a"},"output":{"stdout":"b"}},{"input":{"stdin":"c"},"output":{"stdout":"C"}}]`
	_, out = post(t, h, "/submit", submitBody(completion, bad, ""))
	if out["accepted"] != false || len(out["tests"].([]any)) != 1 {
		t.Errorf("first failure: %v", out)
	}
	_, out = post(t, h, "/submit", submitBody(completion, bad, `"run_all_cases":true`))
	tests = out["tests"].([]any)
	if out["accepted"] != false || len(tests) != 2 || tests[1].(map[string]any)["passed"] != true {
		t.Errorf("run_all_cases: %v", out)
	}
	// The test data may also come as a JSON string.
	s, _ := json.Marshal(cases)
	_, out = post(t, h, "/submit", submitBody(completion, string(s), ""))
	if out["accepted"] != true {
		t.Errorf("string test data: %v", out)
	}
}

func TestSubmitBadInput(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	for _, c := range []struct{ body, want string }{
		{`{"dataset":"code_contests","id":1,"completion":"x","config":{"language":"python"}}`, "no eval class found for dataset code_contests"},
		{`{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"HumanEvalDataset","language":"python"}}`, "HumanEvalDataset"},
		{`{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset"}}`, "config.language"},
		{`{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset","language":"python","provided_data":[1]}}`, "provided_data must be an object"},
		{`{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset","language":"python","provided_data":{"test":[]}}}`, "no cases"},
		{`{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset","language":"python","provided_data":{"test":[{"input":{},"output":{"stdout":""}}]}}}`, "no stdin"},
		{`{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset","language":"python","provided_data":{"test":"[oops"}}}`, "must be a list"},
		{`{"dataset":"d","id":1,"config":{"dataset_type":"CommonOJDataset","language":"python","provided_data":{"test":[]}}}`, "completion is required"},
		{`{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset","language":"python","custom_extract_logic":"submit_code_blocks([])","provided_data":{"test":[]}}}`, "custom_extract_logic"},
		{`{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset","language":"julia","provided_data":{"test":[{"input":{"stdin":""},"output":{"stdout":""}}]}}}`, "unsupported language"},
	} {
		status, out := post(t, h, "/submit", c.body)
		if status != 400 || out["code"] != "invalid_argument" || !strings.Contains(out["detail"].(string), c.want) {
			t.Errorf("%.80s: %d %v", c.body, status, out)
		}
	}
	if len(f.reqs) != 0 {
		t.Errorf("%d bad submissions reached FnCall", len(f.reqs))
	}
}

func TestStdoutMatches(t *testing.T) {
	for _, c := range []struct {
		got, want string
		ok        bool
	}{
		{"ABC\n", "abc", true},
		{"  1 2 \n3\n", "1 2\n 3", true},
		{"0.3333333", "0.33333333333", true},
		{"1e9", "1000000000", true},
		{"0.334", "0.333", false},
		{"1\n2", "1", false},
		{"", "", true},
		{"a\n\n", "a", true},
		{"nan", "nan", true},
		{"x", "y", false},
	} {
		if got := stdoutMatches(c.got, c.want); got != c.ok {
			t.Errorf("%q vs %q: %v", c.got, c.want, got)
		}
	}
}

func TestExtractCode(t *testing.T) {
	for _, c := range []struct{ completion, lang, code, kind string }{
		{"```cpp\nint a;\n```\n```python\nprint(1)\n```", "python", "print(1)", "fenced"},
		{"```\nplain\n```", "python", "plain", "fenced"},
		{"```js\nx\n```\n```go\npackage main\n```", "python", "x", "fenced"},
		{"text\n```py\nprint(2)\nno end", "python", "print(2)\nno end", "incomplete_fenced"},
		{"import os\ndef f(x):\n    return x\n\nprint(f(1))", "python", "import os\ndef f(x):\n    return x\n", "heuristic"},
		{"echo hi\n\necho there", "bash", "echo hi\necho there\n", "heuristic"},
		{"just words", "cpp", "", "empty"},
	} {
		code, kind := extractCode(c.completion, c.lang)
		if code != c.code || kind != c.kind {
			t.Errorf("%q: got %q (%s), want %q (%s)", c.completion, code, kind, c.code, c.kind)
		}
	}
}

func FuzzRunCodeRequest(f *testing.F) {
	f.Add([]byte(`{"code":"print(1)","language":"python","files":{"a":"eA=="},"run_timeout":1}`))
	f.Add([]byte(`{"code":"x","language":"cpp","memory_limit_MB":-1,"stdin":null}`))
	h := New(&fakeFnCall{res: accepted}, Options{MaxBodyBytes: 1 << 16})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/run_code", bytes.NewReader(body)))
		if rec.Code != 200 && (rec.Code < 400 || rec.Code >= 500) {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer is not JSON: %q", rec.Body)
		}
	})
}

func FuzzSubmitRequest(f *testing.F) {
	f.Add([]byte(submitBody("```python\nprint(1)\n```", `[{"input":{"stdin":"1"},"output":{"stdout":"1"}}]`, "")))
	h := New(&fakeFnCall{res: accepted}, Options{MaxBodyBytes: 1 << 16})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/submit", bytes.NewReader(body)))
		if rec.Code != 200 && (rec.Code < 400 || rec.Code >= 500) {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}

func FuzzExtractCode(f *testing.F) {
	f.Add("```python\nprint(1)\n```", "python")
	f.Add("def f():\n  pass\n", "python")
	f.Fuzz(func(t *testing.T, completion, lang string) {
		code, kind := extractCode(completion, lang)
		if kind == "empty" && code != "" {
			t.Fatal("empty extraction with code")
		}
		if len(code) > len(completion)+1 {
			t.Fatalf("extracted more than the completion: %q from %q", code, completion)
		}
	})
}
