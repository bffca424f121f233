package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBaselineInterleaves runs two fake builds: each round runs both, the
// order alternating, each with its own data dir and --json; the figures are
// each side's median and new/old.
func TestBaselineInterleaves(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	fake := func(name, json string) string {
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\necho \"" + name + " $*\" >>" + log + "\necho progress >&2\necho '" + json + "'\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := fake("old", `{"bench":"exec","commit":"abc","p50_ms":2,"sides":{"api":{"creates_per_s":100}},"gone_ms":1}`)
	cur := fake("new", `{"bench":"exec","commit":"def","p50_ms":1,"sides":{"api":{"creates_per_s":150}},"added_ms":3}`)
	r, err := Baseline(context.Background(), BaselineOptions{Old: old, New: cur, Rounds: 3,
		Args: []string{"bench", "exec", "--n", "5", "--data-dir", "/x/d"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"old", "new", "new", "old", "old", "new"}; !slices.Equal(r.Order, want) {
		t.Errorf("order %v, want %v", r.Order, want)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 6 || lines[0] != "old bench exec --n 5 --data-dir /x/d-old --json" || lines[1] != "new bench exec --n 5 --data-dir /x/d-new --json" {
		t.Errorf("runs:\n%s", b)
	}
	got := map[string]Figure{}
	for _, f := range r.Figures {
		got[f.Name] = f
	}
	if f := got["p50_ms"]; f.Old != 2 || f.New != 1 || f.Ratio != 0.5 {
		t.Errorf("p50_ms: %+v", f)
	}
	if f := got["sides.api.creates_per_s"]; f.Ratio != 1.5 {
		t.Errorf("sides.api.creates_per_s: %+v", f)
	}
	if _, ok := got["process_cpu_s"]; !ok {
		t.Errorf("no process_cpu_s in %v", r.Figures)
	}
	if !slices.Equal(r.OnlyOld, []string{"gone_ms"}) || !slices.Equal(r.OnlyNew, []string{"added_ms"}) {
		t.Errorf("only old %v, only new %v", r.OnlyOld, r.OnlyNew)
	}
	if r.Old.Commit != "abc" || r.New.Commit != "def" || len(r.Old.Reports) != 3 {
		t.Errorf("old %s (%d reports), new %s", r.Old.Commit, len(r.Old.Reports), r.New.Commit)
	}
	// A build that fails stops the comparison with its side named.
	bad := fake("bad", `not json`)
	if _, err := Baseline(context.Background(), BaselineOptions{Old: bad, New: cur, Args: []string{"bench", "exec"}}); err == nil || !strings.Contains(err.Error(), "old build") {
		t.Errorf("old build printing no JSON: err %v", err)
	}
}
