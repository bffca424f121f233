package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func needJudge(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(imagesDir, "judge", "image.json")); err != nil {
		t.Skip("no judge image (run `make setup`)")
	}
}

func ptr(s string) *string { return &s }

// TestFnCallAPI drives POST /v1/fncall and /v1/fncall/batch through the server
// process: verdicts, the compile cache, streaming batch results with indexes,
// and 400s for bad input.
func TestFnCallAPI(t *testing.T) {
	needJudge(t)
	n := startNode(t)
	ctx := context.Background()
	// The node says it serves FnCall (its Info lists the group), as it serves it.
	info, err := n.cl.Info(ctx)
	if err != nil || !slices.Contains(info.Services, api.ServiceFnCall) {
		t.Fatalf("info services %v (err %v), want %q among them", info.Services, err, api.ServiceFnCall)
	}
	c := api.FnCallRequest{Language: api.LangC,
		Files: map[string]string{"main.c": "#include <stdio.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a*b);return 0;}\n"},
		Tests: []api.FnCallTest{
			{Stdin: "6 7", ExpectedOutput: ptr("42")},
			{Stdin: "2 2", ExpectedOutput: ptr("5")},
		}}
	res, err := n.cl.FnCall(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != api.VerdictWrongAnswer || len(res.Tests) != 2 ||
		res.Tests[0].Verdict != api.VerdictAccepted || res.Tests[1].Verdict != api.VerdictWrongAnswer {
		t.Fatalf("result %+v", res)
	}
	if res.Compile == nil || res.Compile.Verdict != api.VerdictAccepted || res.Compile.Cached {
		t.Fatalf("compile %+v", res.Compile)
	}
	if res.Tests[0].CPUTimeMs < 0 || res.Tests[0].WallTimeMs <= 0 || res.Tests[0].PeakMemoryBytes <= 0 {
		t.Errorf("measurements %+v", res.Tests[0])
	}
	res, err = n.cl.FnCall(ctx, c)
	if err != nil || res.Compile == nil || !res.Compile.Cached {
		t.Fatalf("second call not from the compile cache: %v %+v", err, res.Compile)
	}

	calls := []api.FnCallRequest{
		{Language: api.LangPython3, Files: map[string]string{"main.py": "print(input()[::-1])"},
			Tests: []api.FnCallTest{{Stdin: "abc\n", ExpectedOutput: ptr("cba")}}},
		{Language: api.LangBash, Files: map[string]string{"main.sh": "sleep 30"},
			Limits: api.FnCallLimits{CPUTimeMs: 500, WallTimeMs: 1000}, Tests: []api.FnCallTest{{}}},
		{Language: "cobol", Tests: []api.FnCallTest{{}}},
		{Cmd: []string{"/bin/sh", "-c", "exit 3"}, Tests: []api.FnCallTest{{}}},
	}
	want := []string{api.VerdictAccepted, api.VerdictTimeLimit, "", api.VerdictRuntimeError}
	seen := map[int]bool{}
	err = n.cl.FnCallBatch(ctx, calls, func(r api.FnCallResult) error {
		if r.Index < 0 || r.Index >= len(calls) || seen[r.Index] {
			t.Errorf("bad or repeated index %d", r.Index)
			return nil
		}
		seen[r.Index] = true
		if r.Verdict != want[r.Index] {
			t.Errorf("call %d: verdict %q, want %q (%+v)", r.Index, r.Verdict, want[r.Index], r)
		}
		if r.Index == 2 && (r.Error == nil || r.Error.Code != api.CodeInvalidArgument) {
			t.Errorf("call 2: error %+v, want invalid_argument", r.Error)
		}
		if r.Index == 1 && (len(r.Tests) != 1 || r.Tests[0].TimeLimit != "wall") {
			t.Errorf("call 1: %+v, want a wall time limit", r.Tests)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, body := range []string{
		`{}`,
		`{"language":"c","tests":[{}]}`,
		`{"language":"python3","files":{"../x.py":"print(1)"},"tests":[{}]}`,
		`{"cmd":["/bin/true"],"tests":[{}],"limits":{"cpu_time_ms":-1}}`,
		`{"cmd":["/bin/true"],"tests":[{"compare":{"mode":"fuzzy"}}]}`,
		`{"cmd":["/bin/true"],"tests":[{}],"bogus":1}`,
	} {
		code, e := n.raw(t, http.MethodPost, "/v1/fncall", n.token, strings.NewReader(body))
		if code != http.StatusBadRequest || e.Code != api.CodeInvalidArgument {
			t.Errorf("%s: %d %+v, want 400 invalid_argument", body, code, e)
		}
	}
	code, e := n.raw(t, http.MethodPost, "/v1/fncall", n.token, strings.NewReader(`{"cmd":["/bin/true"],"tests":[{}],"device":"gpu"}`))
	if code != http.StatusNotImplemented || e.Code != api.CodeNotImplemented {
		t.Errorf("device gpu: %d %+v, want 501 not_implemented", code, e)
	}
}

// TestFnCallCLI runs `dsec fncall` against the server.
func TestFnCallCLI(t *testing.T) {
	needJudge(t)
	n := startNode(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	src := write("main.py", "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n")
	in := write("in.txt", "1 2 3\n")
	exp := write("exp.txt", "6\n")
	bad := write("bad.txt", "7\n")
	out, errOut, code := n.cli(t, "", "fncall", "--lang", "python3", "--file", src, "--stdin", in, "--expect", exp)
	if code != 0 || out != "6\n" || !strings.Contains(errOut, "verdict: accepted") {
		t.Fatalf("accepted: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = n.cli(t, "", "fncall", "--lang", "python3", "--file", src, "--stdin", in, "--expect", bad, "--json")
	var res api.FnCallResult
	if err := json.NewDecoder(bytes.NewReader([]byte(out))).Decode(&res); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if code != 1 || res.Verdict != api.VerdictWrongAnswer {
		t.Fatalf("wrong answer: code %d, %+v", code, res)
	}
	spin := write("spin.py", "while True: pass\n")
	out, _, code = n.cli(t, "", "fncall", "--lang", "python3", "--file", spin, "--time", "500ms", "--memory", "64m", "--json")
	res = api.FnCallResult{}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || res.Verdict != api.VerdictTimeLimit {
		t.Fatalf("time limit: code %d, %q", code, out)
	}
}
