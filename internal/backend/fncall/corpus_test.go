package fncall

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestCorpus runs every program of testdata/corpus and asserts its exact verdict
// (and, where the case says so, the time limit kind, exit code, signal, wall time
// bound and peak memory).
func TestCorpus(t *testing.T) {
	e := testEngine(t)
	paths, err := filepath.Glob("testdata/corpus/*.case")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 40 {
		t.Fatalf("corpus has %d programs, want at least 40", len(paths))
	}
	kinds := map[string]bool{}
	langsSeen := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseCase(strings.TrimSuffix(filepath.Base(p), ".case"), b)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		kinds[c.verdict] = true
		langsSeen[c.req.Language] = true
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := e.Call(ctx, c.req)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			checkCase(t, c, res)
		})
	}
	for _, v := range []string{api.VerdictAccepted, api.VerdictWrongAnswer, api.VerdictTimeLimit, api.VerdictMemoryLimit,
		api.VerdictRuntimeError, api.VerdictOutputLimit, api.VerdictCompileError} {
		if !kinds[v] {
			t.Errorf("corpus has no %s program", v)
		}
	}
	for _, l := range append(Languages(), "") {
		if !langsSeen[l] {
			t.Errorf("corpus has no program for language %q", l)
		}
	}
}

func checkCase(t *testing.T, c corpusCase, res api.FnCallResult) {
	t.Helper()
	if res.Verdict != c.verdict {
		t.Fatalf("verdict %s, want %s\ncompile: %+v\ntests: %+v", res.Verdict, c.verdict, res.Compile, res.Tests)
	}
	if c.verdict == api.VerdictCompileError {
		if res.Compile == nil || res.Compile.Output == "" {
			t.Errorf("compile_error without compiler output: %+v", res.Compile)
		}
		return
	}
	if len(res.Tests) != 1 {
		t.Fatalf("%d test results, want 1", len(res.Tests))
	}
	tr := res.Tests[0]
	if want := c.hdr["time_limit"]; want != "" && tr.TimeLimit != want {
		t.Errorf("time_limit %q, want %q (%+v)", tr.TimeLimit, want, tr)
	}
	if c.verdict == api.VerdictTimeLimit && tr.TimeLimit == "" {
		t.Errorf("time_limit verdict without its kind: %+v", tr)
	}
	if want := c.hdr["exit_code"]; want != "" && strconv.Itoa(tr.ExitCode) != want {
		t.Errorf("exit code %d, want %s (%+v)", tr.ExitCode, want, tr)
	}
	if want := c.hdr["signal"]; want != "" && tr.Signal != want {
		t.Errorf("signal %q, want %s (%+v)", tr.Signal, want, tr)
	}
	if m := c.hdr["max_wall_ms"]; m != "" {
		if v, _ := strconv.ParseFloat(m, 64); tr.WallTimeMs > v {
			t.Errorf("wall time %.1f ms, want at most %s ms", tr.WallTimeMs, m)
		}
	}
	if m := c.hdr["min_peak"]; m != "" {
		if v, _ := strconv.ParseInt(m, 10, 64); tr.PeakMemoryBytes < v {
			t.Errorf("peak memory %d, want at least %s", tr.PeakMemoryBytes, m)
		}
	}
	if c.verdict == api.VerdictOutputLimit && c.hdr["file_size"] == "" && !tr.StdoutTruncated {
		t.Errorf("output_limit without stdout_truncated: %+v", tr)
	}
	if tr.WallTimeMs <= 0 {
		t.Errorf("wall time %.3f ms", tr.WallTimeMs)
	}
}
