package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sfPost sends a SandboxFusion request the way verl's sandbox_fusion utility
// does (JSON body, Content-Type and Accept headers, no token unless given) and
// decodes the JSON answer.
func sfPost(t *testing.T, url, token string, payload any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	cl := &http.Client{Timeout: 120 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s: not a JSON object (%d): %s", url, resp.StatusCode, body)
	}
	return resp.StatusCode, out
}

// verlPayload is the body verl's call_sandbox_api sends.
func verlPayload(code, stdin, language string, timeout int) map[string]any {
	return map[string]any{"compile_timeout": timeout, "run_timeout": timeout, "code": code, "stdin": stdin,
		"memory_limit_MB": 1024, "language": language, "files": map[string]any{}, "fetch_files": []any{}}
}

// TestSandboxFusionAPI drives SandboxFusion's /run_code and /submit through the
// real server on both listeners: the main one (bearer token required) and the
// token-less --sandboxfusion-listen one.
func TestSandboxFusionAPI(t *testing.T) {
	needJudge(t)
	sfAddr := freePort(t)
	n := startNode(t, "--sandboxfusion-listen", sfAddr)
	open := "http://" + sfAddr
	main := "http://" + n.addr

	// The main listener wants the token; the SandboxFusion listener none.
	code, out := sfPost(t, main+"/run_code", "", verlPayload("print(1)", "", "python", 10))
	if code != 401 || out["code"] != "unauthorized" {
		t.Fatalf("main listener without a token: %d %v", code, out)
	}
	code, out = sfPost(t, main+"/run_code", n.token, verlPayload("print(input()[::-1])", "olleh", "python", 10))
	if code != 200 || out["status"] != "Success" {
		t.Fatalf("main listener with the token: %d %v", code, out)
	}
	if run := out["run_result"].(map[string]any); run["stdout"] != "hello\n" || run["return_code"] != 0.0 || run["status"] != "Finished" {
		t.Fatalf("run_result %v", run)
	}
	resp, err := http.Get(open + "/v1/ping")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("ping: %v %v", err, resp)
	}
	resp.Body.Close()

	t.Run("languages", func(t *testing.T) {
		for _, c := range []struct{ lang, code, stdin, want string }{
			{"python", "import sys\nprint(sum(map(int, sys.stdin.read().split())))", "1 2 3", "6\n"},
			{"cpp", "#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a*b<<std::endl;}", "6 7", "42\n"},
			{"go", "package main\nimport \"fmt\"\nfunc main(){var a,b int;fmt.Scan(&a,&b);fmt.Println(a-b)}", "9 4", "5\n"},
			{"bash", "read x; echo \"got $x\"", "it", "got it\n"},
			{"nodejs", "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(' ').map(Number); console.log(a + b);", "20 22", "42\n"},
			{"php", "echo intval(trim(fgets(STDIN))) * 3, \"\\n\";", "14", "42\n"}, // no <?php: added, as SandboxFusion does
			{"ruby", "a, b = gets.split.map(&:to_i); puts a ** b", "2 5", "32\n"},
			{"lua", "local a, b = io.read('n', 'n'); print(a // b)", "85 2", "42\n"},
			{"perl", "my ($a, $b) = split ' ', <STDIN>; print $a . $b, \"\\n\";", "4 2", "42\n"},
			{"rust", "use std::io::Read;\nfn main(){let mut s=String::new();std::io::stdin().read_to_string(&mut s).unwrap();let n:u64=s.trim().parse().unwrap();println!(\"{}\",(1..=n).sum::<u64>());}", "8", "36\n"},
			{"java", "import java.util.*;\npublic class Main { public static void main(String[] a) { Scanner s = new Scanner(System.in); System.out.println(s.nextInt() * s.nextInt()); } }", "6 7", "42\n"},
			{"typescript", "const [a, b]: number[] = require('fs').readFileSync(0, 'utf8').trim().split(' ').map(Number);\nconsole.log(a + b);", "40 2", "42\n"},
			{"kotlin_script", "val (a, b) = readLine()!!.split(\" \").map { it.toInt() }\nprintln(a * b)", "6 7", "42\n"},
			{"scala", "object Solution { def main(args: Array[String]): Unit = { val Array(a, b) = scala.io.StdIn.readLine().split(\" \").map(_.toInt); println(a + b) } }", "40 2", "42\n"},
			{"R", "x <- scan(file(\"stdin\"), quiet = TRUE)\ncat(sum(x), \"\\n\", sep = \"\")", "40 2", "42\n"},
			{"csharp", "using System;\nclass Program { static void Main() { var p = Console.ReadLine().Split(' '); Console.WriteLine(int.Parse(p[0]) * int.Parse(p[1])); } }", "6 7", "42\n"},
			{"racket", "#lang racket\n(define a (read))\n(define b (read))\n(displayln (+ a b))", "40 2", "42\n"},
			{"D_ut", "import std.stdio;\nvoid main() { int a, b; readf(\" %d %d\", &a, &b); writeln(a * b); }", "6 7", "42\n"},
			{"verilog", "module tb;\ninitial begin $display(\"%0d\", 6 * 7); $finish; end\nendmodule", "", "42\n"},
		} {
			code, out := sfPost(t, open+"/run_code", "", verlPayload(c.code, c.stdin, c.lang, 30))
			if code != 200 || out["status"] != "Success" {
				t.Errorf("%s: %d %v", c.lang, code, out)
				continue
			}
			if got := out["run_result"].(map[string]any)["stdout"]; got != c.want {
				t.Errorf("%s: stdout %q, want %q", c.lang, got, c.want)
			}
			if strings.Contains(" cpp go rust java typescript scala csharp D_ut verilog ", " "+c.lang+" ") && out["compile_result"] == nil {
				t.Errorf("%s: no compile_result", c.lang)
			}
		}
	})

	// A wrong program per language is Failed: a compile error with the
	// compiler's output and no run, or a run with a non-zero return code.
	t.Run("language failures", func(t *testing.T) {
		for _, c := range []struct{ lang, code, says string }{
			{"java", "public class Main { public static void main(String[] a) { System.uto.println(1); } }", "cannot find symbol"},
			{"typescript", "function (", "error TS"},
			{"scala", "object Main { def main(args: Array[String]): Unit = println(nosuch) }", "not found"},
			{"csharp", "class Program { static void Main() { int x = \"s\"; } }", "error CS"},
			{"D_ut", "unittest { assert(1 + 1 == 3); }\nvoid main() {}", ""},
			{"verilog", "module tb;\ninitial begin $display(\"x\") end\nendmodule", "syntax error"},
			{"kotlin_script", "throw IllegalStateException(\"boom\")", "boom"},
			{"R", "stop(\"boom\")", "boom"},
			{"racket", "#lang racket\n(error \"boom\")", "boom"},
			{"pytest", "def test_add():\n    assert 40 + 1 == 42\n", ""},
			{"junit", "import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.*;\npublic class CalcTest { @Test void adds() { assertEquals(41, 40 + 2); } }", ""},
		} {
			code, out := sfPost(t, open+"/run_code", "", verlPayload(c.code, "", c.lang, 30))
			if code != 200 || out["status"] != "Failed" {
				t.Errorf("%s: %d %v", c.lang, code, out)
				continue
			}
			res, _ := out["run_result"].(map[string]any)
			if comp, _ := out["compile_result"].(map[string]any); comp != nil && comp["return_code"] != 0.0 {
				res = comp
				if out["run_result"] != nil {
					t.Errorf("%s: ran after a compile error: %v", c.lang, out)
				}
			}
			if res == nil || res["return_code"] == 0.0 || !strings.Contains(fmt.Sprint(res["stderr"]), c.says) {
				t.Errorf("%s: the failure is not the program's, or does not say %q: %v", c.lang, c.says, out)
			}
		}
		junit := "import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.*;\npublic class CalcTest { @Test void adds() { assertEquals(42, 40 + 2); } }"
		code, out := sfPost(t, open+"/run_code", "", verlPayload(junit, "", "junit", 30))
		if run, _ := out["run_result"].(map[string]any); code != 200 || out["status"] != "Success" || !strings.Contains(fmt.Sprint(run["stdout"]), "1 tests successful") {
			t.Errorf("junit, passing: %d %v", code, out)
		}
		code, out = sfPost(t, open+"/run_code", "", verlPayload("def test_add():\n    assert 40 + 2 == 42\n", "", "pytest", 30))
		if run, _ := out["run_result"].(map[string]any); code != 200 || out["status"] != "Success" || !strings.Contains(fmt.Sprint(run["stdout"]), "1 passed") {
			t.Errorf("pytest, passing: %d %v", code, out)
		}
		code, out = sfPost(t, open+"/run_code", "", verlPayload("class A", "", "scala", 30))
		if code != 200 || out["status"] != "SandboxError" || out["message"] != "Object name not found." {
			t.Errorf("scala without an object: %d %v", code, out)
		}
	})

	t.Run("failures", func(t *testing.T) {
		code, out := sfPost(t, open+"/run_code", "", verlPayload("import sys; sys.exit(3)", "", "python", 10))
		if code != 200 || out["status"] != "Failed" || out["run_result"].(map[string]any)["return_code"] != 3.0 {
			t.Errorf("exit 3: %d %v", code, out)
		}
		p := verlPayload("while True: pass", "", "python", 1)
		code, out = sfPost(t, open+"/run_code", "", p)
		if run, _ := out["run_result"].(map[string]any); code != 200 || out["status"] != "Failed" || run["status"] != "TimeLimitExceeded" {
			t.Errorf("timeout: %d %v", code, out)
		}
		code, out = sfPost(t, open+"/run_code", "", verlPayload("int main( {", "", "cpp", 10))
		if c, _ := out["compile_result"].(map[string]any); code != 200 || out["status"] != "Failed" || c["return_code"] == 0.0 ||
			!strings.Contains(c["stderr"].(string), "error") || out["run_result"] != nil {
			t.Errorf("compile error: %d %v", code, out)
		}
		p = verlPayload("x = bytearray(512 << 20); print(len(x))", "", "python", 10)
		p["memory_limit_MB"] = 64
		code, out = sfPost(t, open+"/run_code", "", p)
		if run, _ := out["run_result"].(map[string]any); code != 200 || out["status"] != "Failed" || run["return_code"] == 0.0 {
			t.Errorf("memory limit: %d %v", code, out)
		}
		p = verlPayload("print(open('data/in.txt').read())", "", "python", 10)
		p["files"] = map[string]any{"data/in.txt": "ZnJvbSBhIGZpbGU="}
		code, out = sfPost(t, open+"/run_code", "", p)
		if code != 200 || out["run_result"].(map[string]any)["stdout"] != "from a file\n" {
			t.Errorf("files: %d %v", code, out)
		}
	})

	t.Run("SandboxFusion's semantics", func(t *testing.T) {
		// The stack limit is memory_limit_MB (verl: 1,024): a million frames.
		deep := "#include <cstdio>\n__attribute__((noinline)) int down(int n) { volatile char pad[16]; pad[0] = (char)n;\n" +
			"if (n == 0) return 0; int r = down(n - 1); return r + 1 + (pad[0] - (char)n); }\n" +
			"int main() { printf(\"%d\\n\", down(1000000)); }\n"
		code, out := sfPost(t, open+"/run_code", "", verlPayload(deep, "", "cpp", 30))
		if run, _ := out["run_result"].(map[string]any); code != 200 || out["status"] != "Success" || run["stdout"] != "1000000\n" {
			t.Errorf("a million frames deep: %d %v", code, out)
		}
		// compile_timeout: the compile stops, the program does not run.
		p := verlPayload("#include <map>\n#include <string>\n#include <cstdio>\nint main(){std::map<std::string,int> m; m[\"e2e-compile-timeout\"]=1; puts(\"ran\");}", "", "cpp", 10)
		p["compile_timeout"] = 0.05
		code, out = sfPost(t, open+"/run_code", "", p)
		if c, _ := out["compile_result"].(map[string]any); code != 200 || out["status"] != "Failed" || c["status"] != "TimeLimitExceeded" || out["run_result"] != nil {
			t.Errorf("compile_timeout 0.05: %d %v", code, out)
		}
	})

	t.Run("SandboxFusion's Python packages", func(t *testing.T) {
		// tinker-cookbook's grader imports numpy; SandboxFusion's own tests requests.
		code, out := sfPost(t, open+"/run_code", "", verlPayload(
			"import numpy, scipy, pandas, sympy, networkx, requests, matplotlib, sklearn\nprint(int(numpy.arange(4).sum()))", "", "python", 60))
		if run, _ := out["run_result"].(map[string]any); code != 200 || out["status"] != "Success" || run["stdout"] != "6\n" {
			t.Errorf("SandboxFusion's common packages do not import (a judge image older than scripts/judge-python-packages.txt: rebuild it with make setup): %d %v", code, out)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		code, out := sfPost(t, open+"/run_code", "", verlPayload("x", "", "swift", 10))
		if code != 400 || !strings.Contains(out["detail"].(string), "unsupported language") {
			t.Errorf("swift: %d %v", code, out)
		}
		p := verlPayload("x", "", "python", 10)
		p["files"] = map[string]any{"../../etc/passwd": "eA=="}
		if code, out := sfPost(t, open+"/run_code", "", p); code != 400 {
			t.Errorf("path escape: %d %v", code, out)
		}
		// Nothing else was disturbed: the node still runs programs.
		if code, out := sfPost(t, open+"/run_code", "", verlPayload("print(2)", "", "python", 10)); code != 200 || out["status"] != "Success" {
			t.Errorf("after bad input: %d %v", code, out)
		}
	})

	t.Run("submit", func(t *testing.T) {
		cases := []map[string]any{
			{"input": map[string]any{"stdin": "3 4\n"}, "output": map[string]any{"stdout": "7\n"}},
			{"input": map[string]any{"stdin": "10 -2\n"}, "output": map[string]any{"stdout": "8"}},
		}
		sub := func(completion string) map[string]any {
			return map[string]any{"dataset": "adhoc", "id": "q1", "completion": completion,
				"config": map[string]any{"dataset_type": "CommonOJDataset", "language": "python", "run_timeout": 10,
					"provided_data": map[string]any{"id": "q1", "content": "add two numbers", "test": cases},
					"extra":         map[string]any{"run_all_cases": true}}}
		}
		code, out := sfPost(t, open+"/submit", "", sub("Sure:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"))
		if code != 200 || out["accepted"] != true || len(out["tests"].([]any)) != 2 || out["id"] != "q1" {
			t.Fatalf("accepted submission: %d %v", code, out)
		}
		code, out = sfPost(t, open+"/submit", "", sub("```python\na, b = map(int, input().split())\nprint(a * b)\n```"))
		tests, _ := out["tests"].([]any)
		if code != 200 || out["accepted"] != false || len(tests) != 2 || tests[0].(map[string]any)["passed"] != false {
			t.Fatalf("wrong submission: %d %v", code, out)
		}
	})
}
