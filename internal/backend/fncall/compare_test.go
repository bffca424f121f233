package fncall

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		mode      string
		eps       float64
		got, want string
		ok        bool
	}{
		{api.CompareExact, 0, "a\n", "a\n", true},
		{api.CompareExact, 0, "a \n", "a\n", false},
		{api.CompareExact, 0, "a", "a\n", false},
		{"", 0, "a  \r\nb\t\n\n\n", "a\nb", true},
		{"", 0, "a\n\nb\n", "a\nb\n", false},
		{"", 0, " a\n", "a\n", false},
		{"", 0, "", "\n\n", true},
		{api.CompareTrailing, 0, "1 2\n", "1 3\n", false},
		{api.CompareFloat, 1e-6, "0.3333333 x\n", "0.333333  x", true},
		{api.CompareFloat, 1e-9, "3.14159265", "3.141592", false},
		{api.CompareFloat, 0, "1000000.5", "1000000.0", true}, // relative 1e-6 (default epsilon)
		{api.CompareFloat, 1e-6, "1 2", "1 2 3", false},
		{api.CompareFloat, 1e-6, "nan", "nan", true},
		{api.CompareFloat, 1e-6, "nan", "1", false},
		{api.CompareFloat, 1e-6, "inf", "1e308", false},
		{api.CompareFloat, 1e-6, "YES", "yes", false},
	} {
		ok, msg := Compare(c.mode, c.eps, []byte(c.got), []byte(c.want))
		if ok != c.ok {
			t.Errorf("Compare(%q, %g, %q, %q) = %v (%s), want %v", c.mode, c.eps, c.got, c.want, ok, msg, c.ok)
		}
		if !ok && msg == "" {
			t.Errorf("Compare(%q, %q, %q): mismatch without a message", c.mode, c.got, c.want)
		}
	}
}

func FuzzCompare(f *testing.F) {
	f.Add("1 2\n", "1 2", 1e-6)
	f.Add("0.1\r\n", "0.10000001", 0.0)
	f.Add("", "\n", 1.0)
	f.Fuzz(func(t *testing.T, got, want string, eps float64) {
		for _, mode := range []string{api.CompareExact, api.CompareTrailing, api.CompareFloat, ""} {
			Compare(mode, eps, []byte(got), []byte(want)) // never panics
			if ok, msg := Compare(mode, eps, []byte(got), []byte(got)); !ok && !(mode == api.CompareFloat && eps < 0) {
				// identical outputs always match (float: NaN tokens compare as text)
				t.Fatalf("%s: %q does not match itself: %s", mode, got, msg)
			}
		}
		// trailing whitespace never matters in the default mode
		if ok, _ := Compare("", 0, []byte(got+" \n\t\n"), []byte(got)); !ok && !strings.ContainsAny(got, "\n") {
			t.Fatalf("trailing whitespace changed the verdict for %q", got)
		}
		// exact match implies every other mode matches
		if ok, _ := Compare(api.CompareExact, 0, []byte(got), []byte(want)); ok {
			for _, mode := range []string{api.CompareTrailing, api.CompareFloat} {
				if ok2, msg := Compare(mode, eps, []byte(got), []byte(want)); !ok2 {
					t.Fatalf("%s rejects an exact match: %s", mode, msg)
				}
			}
		}
	})
}

func FuzzValidate(f *testing.F) {
	f.Add(`{"language":"c","files":{"main.c":"int main(){}"},"tests":[{}]}`)
	f.Add(`{"cmd":["/bin/true"],"tests":[{"compare":{"mode":"float","epsilon":-1}}]}`)
	f.Add(`{"language":"python3","files":{"a/../b.py":""},"tests":[{}],"limits":{"memory_bytes":1}}`)
	f.Add(`{"cmd":["x\u0000"],"tests":[{}],"device":"gpu"}`)
	f.Fuzz(func(t *testing.T, body string) {
		var req api.FnCallRequest
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		if err := Validate(&req); err != nil {
			return
		}
		// a valid request is runnable: a program, tests, sane limits and names
		if (req.Language == "") == (len(req.Cmd) == 0) || len(req.Tests) == 0 {
			t.Fatalf("accepted %s", body)
		}
		for name := range req.Files {
			if strings.HasPrefix(name, "/") || strings.Contains("/"+name+"/", "/../") || strings.ContainsRune(name, 0) {
				t.Fatalf("accepted file name %q", name)
			}
		}
		l := effectiveLimits(req.Limits)
		if l.CPU <= 0 || l.Wall <= 0 || l.Memory < 4<<20 || l.Procs <= 0 || l.Output <= 0 || l.FileSize <= 0 {
			t.Fatalf("limits %+v from %s", l, body)
		}
		if req.Language != "" {
			if _, err := mainFile(&req); err != nil {
				t.Fatalf("valid request without a main file: %v", err)
			}
		}
	})
}
