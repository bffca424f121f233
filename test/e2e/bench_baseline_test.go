package e2e

import (
	"encoding/json"
	"os/exec"
	"slices"
	"testing"

	"github.com/dsec-dev/dsec/internal/bench"
)

// TestBenchBaseline runs `dsec bench exec --baseline OLD` with OLD this very
// binary at a tiny size, so the comparison mode cannot rot: both builds run,
// interleaved, each with its own node, and every figure has both sides and a
// ratio.
func TestBenchBaseline(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	out, err := exec.Command(binPath, "bench", "exec", "--n", "5", "--baseline", binPath, "--rounds", "1", "--json").Output()
	if err != nil {
		t.Fatalf("bench exec --baseline: %v", err)
	}
	var r struct {
		bench.Envelope
		bench.BaselineResult
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("not one JSON object: %v: %s", err, out)
	}
	if r.Bench != "exec" || r.Kernel == "" || r.Machine.NProc < 1 || !slices.Equal(r.Order, []string{"old", "new"}) {
		t.Errorf("envelope or order wrong: %s", out)
	}
	if r.Old.Commit != r.New.Commit || len(r.Old.Reports) != 1 || len(r.New.Reports) != 1 {
		t.Errorf("old %s (%d reports), new %s (%d)", r.Old.Commit, len(r.Old.Reports), r.New.Commit, len(r.New.Reports))
	}
	figs := map[string]bench.Figure{}
	for _, f := range r.Figures {
		figs[f.Name] = f
	}
	for _, k := range []string{"p50_ms", "p99_ms", "execs_per_s", "process_cpu_s", "process_wall_s"} {
		if f, ok := figs[k]; !ok || f.Old <= 0 || f.New <= 0 || f.Ratio <= 0 {
			t.Errorf("%s: %+v", k, f)
		}
	}
	if f := figs["n"]; f.Old != 5 || f.Ratio != 1 {
		t.Errorf("n: %+v", f)
	}
	if len(r.OnlyOld)+len(r.OnlyNew) != 0 {
		t.Errorf("the same build reports different figures: %v / %v", r.OnlyOld, r.OnlyNew)
	}
}
