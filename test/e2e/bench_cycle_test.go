package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/bench"
)

// TestBenchCycle runs `dsec bench cycle` for one round: the CLI (three
// commands, and `dsec run --rm`) and Python SDK cycles (three calls, and one
// client.run) and both start-ups are measured, runc beside them, and a peer
// that is not installed is reported missing rather than dropped.
func TestBenchCycle(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	sdk, err := filepath.Abs("../../sdk/python")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binPath, "bench", "cycle", "--n", "1", "--peers", "runc,no-such-runtime",
		"--python-sdk", sdk, "--json").Output()
	if err != nil {
		t.Fatalf("bench cycle: %v", err)
	}
	var r struct {
		bench.Envelope
		bench.CycleResult
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("not one JSON object: %v: %s", err, out)
	}
	if r.Bench != "cycle" || r.Commit == "" {
		t.Errorf("envelope: %s", out)
	}
	want := map[string]*bench.CycleSide{"dsec-cli": r.Sides["dsec-cli"], "dsec-run": r.Sides["dsec-run"], "python-sdk": r.Sides["python-sdk"],
		"python-sdk-run": r.Sides["python-sdk-run"], "dsec --help": r.Startup["dsec --help"], "python3 -c pass": r.Startup["python3 -c pass"]}
	if _, err := exec.LookPath("runc"); err == nil {
		want["runc"] = r.Sides["runc"]
	}
	for name, s := range want {
		if s == nil || s.N != 1 || s.Failures != 0 || s.P50ms <= 0 || s.Minms > s.P50ms {
			t.Errorf("%s: %+v", name, s)
		}
	}
	if r.Missing["no-such-runtime"] == "" {
		t.Errorf("a peer not installed is not reported missing: %v", r.Missing)
	}
}
