package e2e

import (
	"encoding/json"
	"os/exec"
	"testing"
)

// TestBenchCommands runs each benchmark at a tiny size and checks the JSON keys
// the issue promises, with real numbers in them.
func TestBenchCommands(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	cases := []struct {
		args []string
		keys []string
	}{
		{[]string{"bench", "create", "--n", "5", "--parallel", "2", "--compare", "crun", "--json"}, []string{"creates_per_s", "p50_ms", "p99_ms", "ratio_vs_crun"}},
		{[]string{"bench", "exec", "--n", "20", "--json"}, []string{"execs_per_s", "p50_ms", "p99_ms"}},
		{[]string{"bench", "pty", "--n", "20", "--json"}, []string{"p50_ms", "p99_ms", "keys_per_s", "exec_true_p50_ms"}},
		{[]string{"bench", "density", "--n", "10", "--json"}, []string{"sandboxes", "create_s", "teardown_s"}},
	}
	for _, c := range cases {
		t.Run(c.args[1], func(t *testing.T) {
			if c.args[1] == "create" {
				if _, err := exec.LookPath("crun"); err != nil {
					t.Skip("crun not installed")
				}
			}
			out, err := exec.Command(binPath, c.args...).Output()
			if err != nil {
				t.Fatalf("%v: %v", c.args, err)
			}
			var m map[string]any
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("not one JSON object: %q", out)
			}
			for _, k := range c.keys {
				v, ok := m[k].(float64)
				if !ok || v <= 0 {
					t.Errorf("%s = %v in %s", k, m[k], out)
				}
			}
			// Memory per sandbox is measured host-wide (MemAvailable), so at this
			// size it is noise; it must still be reported.
			if _, ok := m["bytes_per_sandbox"]; c.args[1] == "density" && (!ok || m["sandboxes"] != float64(10)) {
				t.Errorf("density: %s", out)
			}
			for _, k := range []string{"bench", "commit", "kernel", "started_at", "machine", "loadavg_before", "loadavg_after"} {
				if _, ok := m[k]; !ok {
					t.Errorf("envelope key %s missing in %s", k, out)
				}
			}
			if f, _ := m["failures"].(float64); f != 0 {
				t.Errorf("failures in %s", out)
			}
		})
	}
}
