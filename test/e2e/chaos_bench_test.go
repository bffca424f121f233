package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/bench"
)

// TestBenchCreateSides runs `dsec bench create` at a tiny size with both
// peers: every side (the API, the CLI, crun, runc) made every sandbox in
// interleaved turns, lists the work it did, and the ratios are reported;
// nothing of the peers is left on the host.
func TestBenchCreateSides(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	for _, rt := range []string{"crun", "runc"} {
		if _, err := exec.LookPath(rt); err != nil {
			t.Fatalf("%s not installed (scripts/setup.sh installs it)", rt)
		}
	}
	cmd := exec.Command(binPath, "bench", "create", "--n", "6", "--parallel", "2", "--batch", "3", "--compare", "crun,runc", "--json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench create: %v\n%s", err, out)
	}
	var r bench.CompareResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("not one JSON object: %q", out)
	}
	want := []string{bench.SideAPI, bench.SideCLI, "crun", "runc"}
	if strings.Join(r.Order, ",") != strings.Join(want, ",") {
		t.Errorf("order %v, want %v", r.Order, want)
	}
	for _, name := range want {
		s := r.Sides[name]
		if s == nil || s.N != 6 || s.Failures != 0 || s.PerSecond <= 0 || s.P50ms <= 0 || len(s.Work) < 3 {
			t.Errorf("side %s: %+v", name, s)
		}
	}
	for _, k := range []string{"dsec-api/crun", "dsec-api/runc", "dsec-cli/crun", "dsec-cli/runc"} {
		if r.Ratios[k] <= 0 {
			t.Errorf("ratio %s missing: %v", k, r.Ratios)
		}
	}
	if r.RatioVsCrun != r.Ratios["dsec-api/crun"] || r.CreatesPerS != r.Sides[bench.SideAPI].PerSecond {
		t.Errorf("top-level figures are not the API side's: %+v", r)
	}
	// The peers' cgroups and files are named after the benchmark's pid.
	tag := "-" + strconv.Itoa(cmd.Process.Pid) + "-"
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/dsec-peer-*" + tag + "*"); len(left) > 0 {
		t.Errorf("peer cgroups left: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "dsec-peer-*")); len(left) > 0 {
		t.Logf("peer work dirs in %s (maybe another run's): %v", os.TempDir(), left)
	}
}
