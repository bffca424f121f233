package fncall

import (
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// A memory_limit verdict keeps the measured peak and says the limit was hit;
// it used to report the limit itself as the peak.
func TestJudgeMemoryLimitKeepsMeasuredPeak(t *testing.T) {
	lim := Limits{CPU: time.Second, Wall: 2 * time.Second, Memory: 64 << 20, Output: 1 << 20}
	for name, c := range map[string]struct {
		r        Result
		verdict  string
		limitHit bool
	}{
		"oom kill below the limit": {Result{OOM: true, MaxRSS: 40 << 20, Signal: 9, ExitCode: -1}, api.VerdictMemoryLimit, true},
		"peak above the limit":     {Result{MaxRSS: 70 << 20}, api.VerdictMemoryLimit, true},
		"within the limit":         {Result{MaxRSS: 30 << 20}, api.VerdictAccepted, false},
	} {
		t.Run(name, func(t *testing.T) {
			out := judge(c.r, lim, api.FnCallTest{})
			if out.Verdict != c.verdict || out.PeakMemoryBytes != c.r.MaxRSS || out.LimitHit != c.limitHit {
				t.Fatalf("verdict %s peak %d limit_hit %v; want %s, the measured %d, %v",
					out.Verdict, out.PeakMemoryBytes, out.LimitHit, c.verdict, c.r.MaxRSS, c.limitHit)
			}
		})
	}
}

// The program's source is main.EXT, else the only source of the language;
// several are refused, except for junit whose compile takes every source.
func TestMainFile(t *testing.T) {
	for _, c := range []struct {
		lang  string
		files []string
		main  string // "" : refused
	}{
		{api.LangJava, []string{"Main.java"}, "Main.java"},
		{api.LangJava, []string{"A.java", "B.java"}, ""},
		{api.LangPython3, []string{"a.py", "b.py"}, ""},
		{api.LangPython3, []string{"a.py", "main.py"}, "main.py"},
		{api.LangJUnit, []string{"CalcTest.java", "Calc.java"}, "Calc.java"},
		{api.LangScala, []string{"data.txt"}, ""},
	} {
		req := api.FnCallRequest{Language: c.lang, Files: map[string]string{}}
		for _, f := range c.files {
			req.Files[f] = "x"
		}
		got, err := mainFile(&req)
		if got != c.main || (err == nil) != (c.main != "") {
			t.Errorf("%s %v: %q, %v; want %q", c.lang, c.files, got, err, c.main)
		}
	}
}
