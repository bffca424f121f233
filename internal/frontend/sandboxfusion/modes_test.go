package sandboxfusion

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/fncall"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// go_test and sql run as raw commands in FnCall's work directory: the
// request FnCall gets is SandboxFusion's command.
func TestRunCodeCommandModes(t *testing.T) {
	f := &fakeFnCall{res: accepted}
	h := New(f, Options{})
	if code, out := post(t, h, "/run_code", `{"code":"package main","language":"go_test","files":{"x.txt":"eA=="}}`); code != 200 {
		t.Fatalf("go_test: %d %v", code, out)
	}
	req := f.last(t)
	if req.Language != "" || strings.Join(req.Cmd, " ") != "/usr/bin/go test main_test.go" ||
		req.Files["main_test.go"] != "package main" || req.Files["x.txt"] != "x" || req.Env["GO111MODULE"] != "off" {
		t.Errorf("go_test request %+v", req)
	}
	if code, out := post(t, h, "/run_code", `{"code":"SELECT 1;","language":"sql"}`); code != 200 {
		t.Fatalf("sql: %d %v", code, out)
	}
	req = f.last(t)
	if req.Language != "" || len(req.Cmd) != 5 || req.Cmd[0] != "/usr/bin/python3" || req.Cmd[4] != "main.sql" ||
		req.Files["main.sql"] != "SELECT 1;" {
		t.Errorf("sql request %+v", req)
	}
	if code, _ := post(t, h, "/run_code", `{"code":"SELECT 1;","language":"sql","files":{"main.sql":"eA=="}}`); code != 400 {
		t.Errorf("a file named like the program: %d, want 400", code)
	}
}

// SandboxFusion's extract_sql: a fence named sql, SQL or Sql, else every
// query from SELECT (or WITH ... AS) to its first ";".
func TestExtractSQL(t *testing.T) {
	for _, c := range []struct{ in, want, kind string }{
		{"Here:\n```SQL\nSELECT 1;\n```\n", "SELECT 1;", "fenced"},
		{"The answer is\n  select a, b\nfrom t where a > 1; and more", "  select a, b\nfrom t where a > 1", "heuristic"},
		{"with x as (select 1) select * from x;", "with x as (select 1) select * from x", "heuristic"},
	} {
		if got, kind := extractCode(c.in, "sql"); got != c.want || kind != c.kind {
			t.Errorf("%q: got %q (%s), want %q (%s)", c.in, got, kind, c.want, c.kind)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if realEng != nil {
		if err := realEng.Close(); err != nil {
			println("closing engine:", err.Error())
			code = 1
		}
	}
	if realState != "" {
		if err := os.RemoveAll(realState); err != nil {
			println("removing the engine's state:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

// engineFnCalls serves the handler from a real FnCall engine.
type engineFnCalls struct{ e *fncall.Engine }

func (e engineFnCalls) FnCall(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	return e.e.Call(ctx, req)
}

var (
	realOnce  sync.Once
	realEng   *fncall.Engine
	realErr   error
	realState string // the engine's state directory, removed by TestMain
)

// realHandler is a Handler over a real FnCall engine on the judge image
// (skipped without root or the image, as FnCall's own tests are).
func realHandler(t *testing.T) *Handler {
	t.Helper()
	dir := os.Getenv("DSEC_IMAGES_DIR")
	if dir == "" {
		dir = "/var/lib/dsec/images"
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(filepath.Join(dir, fncall.DefaultImage, "image.json")); err != nil {
		t.Skip("no judge image (run `make setup`)")
	}
	realOnce.Do(func() {
		state, err := os.MkdirTemp("", "sf-fncall-")
		if err != nil {
			realErr = err
			return
		}
		realState = state
		realEng, realErr = fncall.New(fncall.Config{Images: &image.Store{Dir: dir}, StateDir: state})
	})
	if realErr != nil {
		t.Fatal(realErr)
	}
	return New(engineFnCalls{realEng}, Options{})
}

// modeCase is one /run_code call and what SandboxFusion answers it.
type modeCase struct {
	name, code, extra string
	status, runStatus string // want
	stdout, stderr    string // substrings of run_result's
	exitNonZero       bool
}

func runModeCases(t *testing.T, h *Handler, lang string, cases []modeCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := post(t, h, "/run_code", `{"language":"`+lang+`","code":`+jsonString(c.code)+c.extra+`}`)
			if code != 200 || out["status"] != c.status {
				t.Fatalf("%d %v", code, out)
			}
			if out["compile_result"] != nil {
				t.Errorf("compile_result %v: SandboxFusion runs this mode without a compile step", out["compile_result"])
			}
			run, _ := out["run_result"].(map[string]any)
			if run == nil || run["status"] != c.runStatus {
				t.Fatalf("run_result %v", run)
			}
			stdout, _ := run["stdout"].(string)
			stderr, _ := run["stderr"].(string)
			if !strings.Contains(stdout, c.stdout) || !strings.Contains(stderr, c.stderr) {
				t.Errorf("stdout %q (want %q in it), stderr %q (want %q in it)", stdout, c.stdout, stderr, c.stderr)
			}
			rc, _ := run["return_code"].(float64)
			if c.runStatus == CmdFinished && (rc != 0) != c.exitNonZero {
				t.Errorf("return_code %v", run["return_code"])
			}
		})
	}
}

// SandboxFusion's go_test cases (tests/runners/test_go_test.py) without
// testify, plus a compile error, a panic, a timeout and a memory limit.
func TestRealGoTest(t *testing.T) {
	h := realHandler(t)
	const fn = "package main\n\nimport \"testing\"\n\nfunc Add(a, b int) int { return a OP b }\n\n" +
		"func TestAdd(t *testing.T) {\n\tif got := Add(2, 3); got != 5 {\n\t\tt.Errorf(\"Add(2, 3) = %d, want 5\", got)\n\t}\n}\n"
	mem := `,"run_timeout":60,"memory_limit_MB":512`
	runModeCases(t, h, "go_test", []modeCase{
		{name: "pass", code: strings.Replace(fn, "OP", "+", 1), extra: mem, status: StatusSuccess, runStatus: CmdFinished, stdout: "ok"},
		{name: "wrong", code: strings.Replace(fn, "OP", "-", 1), extra: mem, status: StatusFailed, runStatus: CmdFinished,
			stdout: "Add(2, 3) = -1, want 5", exitNonZero: true},
		{name: "compile error", code: "package main\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { undefined() }\n", extra: mem,
			status: StatusFailed, runStatus: CmdFinished, stderr: "undefined: undefined", exitNonZero: true},
		{name: "panic", code: "package main\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { var m map[string]int; m[\"a\"] = 1 }\n", extra: mem,
			status: StatusFailed, runStatus: CmdFinished, stdout: "assignment to entry in nil map", exitNonZero: true},
		{name: "timeout", code: "package main\n\nimport (\n\t\"testing\"\n\t\"time\"\n)\n\nfunc TestTimeout(t *testing.T) { time.Sleep(200 * time.Millisecond) }\n",
			extra: `,"run_timeout":0.19`, status: StatusFailed, runStatus: CmdTimeLimit},
		{name: "memory", code: "package main\n\nimport \"testing\"\n\nvar keep [][]byte\n\nfunc TestBig(t *testing.T) {\n\tfor i := 0; i < 64; i++ {\n\t\tb := make([]byte, 64<<20)\n\t\tfor j := range b {\n\t\t\tb[j] = 1\n\t\t}\n\t\tkeep = append(keep, b)\n\t}\n}\n",
			extra: mem, status: StatusFailed, runStatus: CmdFinished, exitNonZero: true},
	})
}

// sql runs the script on an in-memory SQLite database and prints what the
// sqlite3 shell prints for it (the outputs below are sqlite3 3.40's).
func TestRealSQL(t *testing.T) {
	h := realHandler(t)
	runModeCases(t, h, "sql", []modeCase{
		{name: "hello", code: "CREATE TABLE t(a INTEGER, b TEXT, c REAL);\nINSERT INTO t VALUES (1, 'x;y', 1.0), (2, NULL, 0.1), (3, 'é', 1e20); SELECT a, b, c FROM t ORDER BY a;\n" +
			"-- a comment; with a semicolon\nSELECT 0.1 + 0.2, 2.5e-7, 1/3.0, 7/2, 'it''s';\nSELECT count(*) FROM t",
			status: StatusSuccess, runStatus: CmdFinished, stdout: "1|x;y|1.0\n2||0.1\n3|é|1.0e+20\n0.3|2.5e-07|0.333333333333333|3|it's\n3\n"},
		{name: "syntax error", code: "SELECT 1;\nSELEC 2;\nSELECT 3;", status: StatusFailed, runStatus: CmdFinished,
			stdout: "1\n3\n", stderr: "near line 2: near \"SELEC\": syntax error", exitNonZero: true},
		{name: "runtime error", code: "CREATE TABLE t(a UNIQUE);\nINSERT INTO t VALUES (1);\nINSERT INTO t VALUES (1);", status: StatusFailed,
			runStatus: CmdFinished, stderr: "near line 3: UNIQUE constraint failed: t.a", exitNonZero: true},
		{name: "timeout", code: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;",
			extra: `,"run_timeout":1`, status: StatusFailed, runStatus: CmdTimeLimit},
		{name: "memory", code: "SELECT length(randomblob(400000000));", extra: `,"memory_limit_MB":128`,
			status: StatusFailed, runStatus: CmdFinished, exitNonZero: true},
	})
	t.Run("submit", func(t *testing.T) { // a right and a wrong answer, judged on stdout
		cases := `[{"input":{"stdin":""},"output":{"stdout":"42\n"}}]`
		for completion, want := range map[string]bool{"```sql\nSELECT 6 * 7;\n```": true, "SELECT 6 * 9;": false} {
			code, out := post(t, h, "/submit", strings.Replace(submitBody(completion, cases, ""), `"language":"python"`, `"language":"sql"`, 1))
			if code != 200 || out["accepted"] != want {
				t.Errorf("%q: %d %v, want accepted %v", completion, code, out, want)
			}
		}
	})
}
