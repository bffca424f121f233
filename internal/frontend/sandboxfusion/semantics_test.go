package sandboxfusion

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dsec-dev/dsec/pkg/api"
)

// The cases below are SandboxFusion's documented behaviour (its RunCodeRequest
// fields, runners/base.py limits, utils/common.py truncate_str and
// ensure_json, server/online_judge_api.py errors), one test each.

// SandboxFusion sets RLIMIT_STACK to memory_limit_MB when one is given (verl
// gives 1,024), and leaves the default stack without one.
func TestRunCodeStackLimitIsTheMemoryLimit(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	for _, c := range []struct {
		mem   string
		stack int64
	}{{`,"memory_limit_MB":1024`, 1 << 30}, {`,"memory_limit_MB":64`, 64 << 20}, {`,"memory_limit_MB":-1`, 0}, {``, 0}} {
		if code, out := post(t, h, "/run_code", `{"code":"x","language":"cpp"`+c.mem+`}`); code != 200 {
			t.Fatalf("%s: %d %v", c.mem, code, out)
		}
		if got := f.last(t).Limits.StackBytes; got != c.stack {
			t.Errorf("%q: stack limit %d, want %d", c.mem, got, c.stack)
		}
	}
}

// compile_timeout (default 10 s) bounds the compile; past it the compile
// result is TimeLimitExceeded, the program does not run, the status is Failed.
func TestRunCodeCompileTimeout(t *testing.T) {
	f := &fakeFnCall{res: func(req api.FnCallRequest) (api.FnCallResult, error) {
		return api.FnCallResult{Verdict: api.VerdictTimeLimit, Tests: []api.FnCallTestResult{},
			Compile: &api.FnCallCompile{Verdict: api.VerdictTimeLimit, WallTimeMs: 51, Message: "the compile exceeded its time limit of 50ms"}}, nil
	}}
	h := New(f, Options{})
	code, out := post(t, h, "/run_code", `{"code":"int main(){}","language":"cpp","compile_timeout":0.05}`)
	if code != 200 || out["status"] != StatusFailed || out["run_result"] != nil {
		t.Fatalf("%d %v", code, out)
	}
	if c := out["compile_result"].(map[string]any); c["status"] != CmdTimeLimit || c["return_code"] != nil {
		t.Errorf("compile_result %v", c)
	}
	if got := f.last(t).Limits.CompileTimeMs; got != 50 {
		t.Errorf("compile limit %d ms, want 50", got)
	}
	post(t, h, "/run_code", `{"code":"int main(){}","language":"cpp"}`)
	if got := f.last(t).Limits.CompileTimeMs; got != 10000 {
		t.Errorf("default compile limit %d ms, want 10000", got)
	}
}

// A passed case's texts longer than 1,000 characters keep 498 characters at
// each end with "..." between; characters, not bytes.
func TestSubmitTruncatesPassedCasesByCharacters(t *testing.T) {
	h := New(&fakeFnCall{res: accepted}, Options{})
	long := "<" + strings.Repeat("é", 1498) + ">" // 1,500 characters, 2,998 bytes
	exact := strings.Repeat("ü", 1000)            // 1,000 characters: kept whole
	cases, _ := json.Marshal([]StdioTest{
		{Input: map[string]string{"stdin": long}, Output: map[string]string{"stdout": strings.ToUpper(long)}},
		{Input: map[string]string{"stdin": exact}, Output: map[string]string{"stdout": strings.ToUpper(exact)}},
		{Input: map[string]string{"stdin": long}, Output: map[string]string{"stdout": "wrong"}},
	})
	code, out := post(t, h, "/submit", submitBody("```python\nprint(input().upper())\n```", string(cases), `"run_all_cases":true`))
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	tests := out["tests"].([]any)
	info := func(i int) (string, string, bool) {
		tc := tests[i].(map[string]any)
		ti := tc["test_info"].(map[string]any)
		return ti["input"].(map[string]any)["stdin"].(string), ti["output"].(map[string]any)["stdout"].(string), tc["passed"].(bool)
	}
	in, outText, passed := info(0)
	want := "<" + strings.Repeat("é", 497) + "..." + strings.Repeat("é", 497) + ">"
	if !passed || in != want || outText != strings.ToUpper(want) {
		t.Errorf("passed case: stdin %d chars %q...", utf8.RuneCountInString(in), in[:20])
	}
	if strings.ContainsRune(in, utf8.RuneError) || !utf8.ValidString(in) {
		t.Error("truncation cut a character")
	}
	if in, _, _ := info(1); in != exact {
		t.Errorf("a 1,000-character text was shortened to %d characters", utf8.RuneCountInString(in))
	}
	if in, _, passed := info(2); passed || in != long {
		t.Errorf("a failed case's text is kept whole: passed %v, %d characters", passed, utf8.RuneCountInString(in))
	}
}

// provided_data's "test" column stored as a JSON string is parsed with
// json.loads(strict=False): raw newlines and tabs inside its strings are data.
func TestSubmitProvidedDataRawControlCharacters(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	raw := "[{\"input\": {\"stdin\": \"1 2\n3\t4\"}, \"output\": {\"stdout\": \"1 2\n3\t4\"}}]"
	s, _ := json.Marshal(raw)
	code, out := post(t, h, "/submit", submitBody("```python\nprint(1)\n```", string(s), ""))
	if code != 200 || out["accepted"] != true {
		t.Fatalf("%d %v", code, out)
	}
	if got := f.last(t).Tests[0].Stdin; got != "1 2\n3\t4" {
		t.Errorf("stdin %q", got)
	}
	// Still JSON: a broken text is a 400.
	s, _ = json.Marshal(`[{"input": {"stdin": "1` + "\n" + `}]`)
	if code, out := post(t, h, "/submit", submitBody("x", string(s), "")); code != 400 {
		t.Errorf("broken JSON string: %d %v", code, out)
	}
}

// What dsec does not serve is refused as SandboxFusion refuses: a 400 whose
// body is FastAPI's {"detail": "..."}, with SandboxFusion's own wording for the
// registered datasets.
func TestRefusalsHaveSandboxFusionShape(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	for _, c := range []struct{ path, body, detail string }{
		{"/run_code", `{"code":"x","language":"python","fetch_files":["out.txt"]}`, "fetch_files is not supported"},
		{"/submit", `{"dataset":"code_contests","id":1,"completion":"x","config":{"language":"python"}}`, "no eval class found for dataset code_contests"},
		{"/submit", `{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"HumanEvalDataset","language":"python"}}`, "eval class HumanEvalDataset not found"},
		{"/submit", `{"dataset":"d","id":1,"completion":"x","config":{"dataset_type":"CommonOJDataset","language":"python","custom_extract_logic":"submit_code_blocks([])","provided_data":{"test":[]}}}`, "config.custom_extract_logic is not supported"},
	} {
		status, out := post(t, h, c.path, c.body)
		d, ok := out["detail"].(string)
		if status != 400 || !ok || !strings.HasPrefix(d, c.detail) {
			t.Errorf("%s %.60s: %d %v", c.path, c.body, status, out)
		}
	}
	if len(f.reqs) != 0 {
		t.Errorf("%d refused requests reached FnCall", len(f.reqs))
	}
}

// SandboxFusion's languages from Debian run with its commands; PHP without its
// opening tag gets one (SandboxFusion's ensure_php_tag_in_string).
func TestRunCodeLanguages(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	for _, c := range []struct{ lang, fncall, main string }{
		{"nodejs", api.LangNodeJS, "main.js"}, {"php", api.LangPHP, "main.php"}, {"ruby", api.LangRuby, "main.rb"},
		{"lua", api.LangLua, "main.lua"}, {"perl", api.LangPerl, "main.pl"}, {"rust", api.LangRust, "main.rs"},
		{"java", api.LangJava, "Main.java"}, {"typescript", api.LangTypeScript, "main.ts"}, {"pytest", api.LangPytest, "main.py"},
		{"kotlin_script", api.LangKotlinScript, "main.kts"}, {"R", api.LangR, "main.R"}, {"csharp", api.LangCSharp, "Program.cs"},
		{"racket", api.LangRacket, "main.rkt"}, {"D_ut", api.LangD, "main.d"}, {"verilog", api.LangVerilog, "main.sv"},
	} {
		if code, out := post(t, h, "/run_code", `{"code":"  echo 1;","language":"`+c.lang+`"}`); code != 200 {
			t.Fatalf("%s: %d %v", c.lang, code, out)
		}
		req := f.last(t)
		want := "  echo 1;"
		if c.lang == "php" {
			want = "<?php\necho 1;"
		}
		if req.Language != c.fncall || len(req.Files) != 1 || req.Files[c.main] != want {
			t.Errorf("%s: language %q, files %q", c.lang, req.Language, req.Files)
		}
	}
	post(t, h, "/run_code", `{"code":"\n<?php echo 1;","language":"php"}`)
	if got := f.last(t).Files["main.php"]; got != "<?php echo 1;" {
		t.Errorf("tagged PHP: %q", got)
	}
}

// Scala runs the source's first object (SandboxFusion's find_scala_classname):
// FnCall gets it as OBJECT.scala. Without one SandboxFusion answers a
// SandboxError whose compile result is an Error "Object name not found.",
// and nothing runs.
func TestRunCodeScalaObject(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	src := "import scala.io.StdIn\nobject Solution extends App {\n  println(StdIn.readLine())\n}\nobject Other"
	b, _ := json.Marshal(map[string]any{"code": src, "language": "scala"})
	if code, out := post(t, h, "/run_code", string(b)); code != 200 || out["status"] != StatusSuccess {
		t.Fatalf("%d %v", code, out)
	}
	if req := f.last(t); req.Language != api.LangScala || req.Files["Solution.scala"] != src || len(req.Files) != 1 {
		t.Errorf("language %q, files %q", req.Language, req.Files)
	}
	for _, code := range []string{"class A { def f = 1 }", "class A extends B { object C }"} {
		b, _ := json.Marshal(map[string]any{"code": code, "language": "scala"})
		status, out := post(t, h, "/run_code", string(b))
		c, _ := out["compile_result"].(map[string]any)
		if status != 200 || out["status"] != StatusSandboxError || out["message"] != "Object name not found." || out["run_result"] != nil ||
			c == nil || c["status"] != CmdError || c["stderr"] != "Object name not found." {
			t.Errorf("%q: %d %v", code, status, out)
		}
	}
	if len(f.reqs) != 1 {
		t.Errorf("%d requests reached FnCall, want 1", len(f.reqs))
	}
}

// /submit gives cpp, go and java (SandboxFusion's compile_languages) the
// configured compile timeout and 10 s to run; the others 20 s to run and the
// default compile timeout.
func TestSubmitTimeoutsByLanguage(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	for _, c := range []struct {
		lang             string
		compileMs, runMs int64
	}{{"java", 3000, 10000}, {"cpp", 3000, 10000}, {"scala", 10000, 20000}, {"typescript", 10000, 20000}} {
		b, _ := json.Marshal(map[string]any{"dataset": "d", "id": 1, "completion": "```" + c.lang + "\nobject Main\n```",
			"config": map[string]any{"dataset_type": "CommonOJDataset", "language": c.lang, "compile_timeout": 3,
				"provided_data": map[string]any{"test": []any{map[string]any{"input": map[string]any{"stdin": "a"}, "output": map[string]any{"stdout": "A"}}}}}})
		body := string(b)
		if code, out := post(t, h, "/submit", body); code != 200 {
			t.Fatalf("%s: %d %v", c.lang, code, out)
		}
		if l := f.last(t).Limits; l.CompileTimeMs != c.compileMs || l.WallTimeMs != c.runMs {
			t.Errorf("%s: compile %d ms, run %d ms; want %d, %d", c.lang, l.CompileTimeMs, l.WallTimeMs, c.compileMs, c.runMs)
		}
	}
}

// junit's file is named after its first public class (SandboxFusion's
// find_java_public_class_name), else Main.java.
func TestRunCodeJUnitFileName(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	for code, file := range map[string]string{
		"import org.junit.jupiter.api.Test;\npublic final class PhoneTest { @Test void t() {} }\nclass Other {}": "PhoneTest.java",
		"class CalcTest { @org.junit.jupiter.api.Test void t() {} }":                                             "Main.java",
	} {
		b, _ := json.Marshal(map[string]any{"code": code, "language": "junit"})
		if status, out := post(t, h, "/run_code", string(b)); status != 200 {
			t.Fatalf("%d %v", status, out)
		}
		if req := f.last(t); req.Language != api.LangJUnit || req.Files[file] != code {
			t.Errorf("%q: language %q, files %q; want %s", code, req.Language, req.Files, file)
		}
	}
}
