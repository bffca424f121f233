package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/dsec-dev/dsec/internal/bench"
)

// burstSize is the CI form of the burst target (3,000 creates at a limit of
// 500); DSEC_BURST_N and DSEC_BURST_LIMIT set the full one (32,000 and 5,000).
func burstSize() (n, limit int) {
	n, limit = 3000, 500
	if v, err := strconv.Atoi(os.Getenv("DSEC_BURST_N")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("DSEC_BURST_LIMIT")); err == nil && v > 0 {
		limit = v
	}
	return n, limit
}

// TestChaosBurst runs `dsec bench burst` as a user would: a burst of creates
// far over the server's --max-sandboxes. Exactly the limit is created and
// listed, every other create is answered promptly with resource_exhausted
// and Retry-After, none hangs, the server's RSS stays bounded, and after the
// teardown the node owns nothing on the host.
func TestChaosBurst(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	n, limit := burstSize()
	dir, err := os.MkdirTemp("/var/lib", "dsec-e2e-burst-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	base := ownedState(t, dir, 0)
	cmd := exec.Command(binPath, "bench", "burst", "--n", strconv.Itoa(n), "--max-sandboxes", strconv.Itoa(limit),
		"--parallel", "128", "--timeout", "60s", "--data-dir", dir, "--json")
	out, err := cmd.Output()
	var r bench.BurstResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("dsec bench burst: %v %v\n%s", err, jerr, out)
	}
	t.Logf("%+v", r)
	if r.Created != limit || r.Listed != limit {
		t.Errorf("created %d, listed %d; want exactly %d", r.Created, r.Listed, limit)
	}
	if r.Exhausted != n-limit || r.WithRetryAfter != r.Exhausted || r.Other != 0 || r.Hung != 0 {
		t.Errorf("resource_exhausted %d (%d with Retry-After), other %d (%s), hung %d; want %d, all with Retry-After",
			r.Exhausted, r.WithRetryAfter, r.Other, r.FirstOther, r.Hung, n-limit)
	}
	if !r.Exact || err != nil {
		t.Errorf("bench burst reports exact=%v, exit %v", r.Exact, err)
	}
	// Promptly: a refusal never waits behind the admitted creates.
	if r.RejectMaxms > 10_000 {
		t.Errorf("a refusal took %.0f ms", r.RejectMaxms)
	}
	if grow := r.RSSMaxKB - r.RSSStartKB; grow > 512<<10 {
		t.Errorf("server RSS grew by %d MiB during the burst", grow>>10)
	}
	requireBaseline(t, dir, 0, base)
}
