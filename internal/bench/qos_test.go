package bench

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// TestQoSSplitTail checks the attribution of the worst bursts: the tail is
// the bursts at or above p99, and each part is the mean of what the LS task
// reported, with the unaccounted rest derived.
func TestQoSSplitTail(t *testing.T) {
	var b strings.Builder
	for i := range 300 {
		// lat wake wake_runnable wall preempted on_cpu
		switch {
		case i%75 == 7: // four slow bursts (the p99 of 300 and above): 8 ms runnable behind another task
			fmt.Fprintf(&b, "12.0 2.0 1.5 10.0 8.0 2.0\n")
		default:
			fmt.Fprintf(&b, "2.1 0.05 0.01 2.05 0.0 2.0\n")
		}
	}
	bs, err := parseLSBursts(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 300 {
		t.Fatalf("%d bursts, want 300", len(bs))
	}
	s := splitBursts(tailBursts(bs))
	want := QoSSplit{Bursts: 4, LatencyMs: 12, WakeMs: 2, WakeRunnableMs: 1.5, WakeOtherMs: 0.5,
		BurstMs: 10, PreemptedMs: 8, OnCPUMs: 2, BurstOtherMs: 0}
	if s != want {
		t.Errorf("tail split %+v, want %+v", s, want)
	}
	if _, err := parseLSBursts("1.0 2.0\n"); err == nil {
		t.Error("a short line parsed")
	}
}

// TestLSScriptReportsSchedstat runs the LS task's script on the host: every
// burst line has its six fields, the CPU time is about the burst, and the
// parts never exceed the whole by more than rounding.
func TestLSScriptReportsSchedstat(t *testing.T) {
	out, err := exec.Command("python3", "-c", lsScript, "20", "2", "5").Output()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := parseLSBursts(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 20 {
		t.Fatalf("%d bursts, want 20", len(bs))
	}
	for i, x := range bs {
		if x.onCPU < 1.9 || x.onCPU > x.wall+0.1 || x.wake+x.wall > x.lat+0.01 || x.lat > x.wake+x.wall+0.01 {
			t.Errorf("burst %d: %+v", i, x)
		}
	}
}
