package driver

import (
	"path"
	"strings"
	"testing"
)

func TestMatchExclude(t *testing.T) {
	pats := []string{"/tmp", "/root/.cache/", "__pycache__", "*.pyc"}
	for p, want := range map[string]bool{
		"/tmp": true, "/tmp/x": true, "/tmpfile": false, "/root/.cache": true, "/root/.cache/pip/w": true,
		"/root/.cachex": false, "/app/__pycache__": true, "/app/m.pyc": true, "/app/m.py": false,
		"/etc/passwd": false, "/": false,
	} {
		if got := MatchExclude(p, pats); got != want {
			t.Errorf("MatchExclude(%q) = %v, want %v", p, got, want)
		}
	}
	if !MatchExclude("/anything", []string{"/"}) {
		t.Error(`"/" excludes everything`)
	}
}

func TestCheckExclude(t *testing.T) {
	for _, bad := range [][]string{{""}, {"[x"}, {"a\x00b"}, {strings.Repeat("a", 4097)}, make([]string, 257)} {
		if err := CheckExclude(bad); err == nil {
			t.Errorf("CheckExclude(%q) accepted", bad)
		}
	}
	if err := CheckExclude([]string{"/tmp", "*.pyc", "__pycache__"}); err != nil {
		t.Error(err)
	}
}

// FuzzExclude: any pattern CheckExclude accepts is matched without a panic, and
// an absolute pattern always matches itself and whatever is under it.
func FuzzExclude(f *testing.F) {
	for _, s := range []string{"/tmp", "*.pyc", "[a-", "/a/../b", "//x", "\\"} {
		f.Add(s, "/a/b")
	}
	f.Fuzz(func(t *testing.T, pat, p string) {
		if CheckExclude([]string{pat}) != nil {
			return
		}
		p = path.Clean("/" + p)
		MatchExclude(p, []string{pat})
		if strings.HasPrefix(pat, "/") {
			c := path.Clean(pat)
			if !MatchExclude(c, []string{pat}) || !MatchExclude(path.Join(c, "x"), []string{pat}) {
				t.Fatalf("%q does not exclude %q or what is under it", pat, c)
			}
		}
	})
}
