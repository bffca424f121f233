package fncall

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// deepRecursion recurses a million frames deep (tens of MiB of stack, far over
// the default 8 MiB) and prints the depth it reached.
const deepRecursion = `#include <cstdio>
__attribute__((noinline)) int down(int n) {
	volatile char pad[16];
	pad[0] = (char)n;
	if (n == 0) return 0;
	int r = down(n - 1);
	return r + 1 + (pad[0] - (char)n);
}
int main() { printf("%d\n", down(1000000)); return 0; }
`

func TestStackLimitLetsDeepRecursionRun(t *testing.T) {
	e := testEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := func(stack int64) api.FnCallRequest {
		return api.FnCallRequest{Language: api.LangCPP, Files: map[string]string{"main.cpp": deepRecursion},
			Tests:  []api.FnCallTest{{}},
			Limits: api.FnCallLimits{CPUTimeMs: 10000, MemoryBytes: 1 << 30, StackBytes: stack}}
	}
	res, err := e.Call(ctx, req(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != api.VerdictAccepted || strings.TrimSpace(res.Tests[0].Stdout) != "1000000" {
		t.Fatalf("a million frames with a 1 GiB stack: verdict %s, test %+v, compile %+v", res.Verdict, res.Tests, res.Compile)
	}
	// The default stack (8 MiB) cannot hold them: the limit is what made it pass.
	res, err = e.Call(ctx, req(0))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != api.VerdictRuntimeError || res.Tests[0].Signal != "SIGSEGV" {
		t.Fatalf("a million frames on the default stack: verdict %s, test %+v", res.Verdict, res.Tests)
	}
}

func TestCompileTimeLimit(t *testing.T) {
	e := testEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A program of its own (not in the compile cache): a distinct constant.
	src := "#include <cstdio>\n#include <map>\n#include <string>\n#include <vector>\nint main() { std::map<std::string, std::vector<int>> m; m[\"compile-time-limit-" +
		time.Now().Format(time.RFC3339Nano) + "\"].push_back(1); printf(\"ran\\n\"); }\n"
	req := api.FnCallRequest{Language: api.LangCPP, Files: map[string]string{"main.cpp": src},
		Tests: []api.FnCallTest{{}}, Limits: api.FnCallLimits{CompileTimeMs: 50}}
	res, err := e.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != api.VerdictTimeLimit || res.Compile == nil || res.Compile.Verdict != api.VerdictTimeLimit {
		t.Fatalf("a 50 ms compile limit: verdict %s, compile %+v", res.Verdict, res.Compile)
	}
	if len(res.Tests) != 0 {
		t.Fatalf("the program ran after its compile timed out: %+v", res.Tests)
	}
	if res.Compile.WallTimeMs > 5000 {
		t.Errorf("the compile was stopped after %v ms, not near its 50 ms limit", res.Compile.WallTimeMs)
	}
	// The timeout was not cached: with room, the same program compiles and runs.
	req.Limits.CompileTimeMs = 60000
	res, err = e.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != api.VerdictAccepted || res.Compile.Cached || strings.TrimSpace(res.Tests[0].Stdout) != "ran" {
		t.Fatalf("with a 60 s compile limit: verdict %s, compile %+v, tests %+v", res.Verdict, res.Compile, res.Tests)
	}
}
