package agent_test

import (
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Usage, with or without counters (the dashboard's and a metrics scrape's read), reports a sandbox that a
// long operation holds as it was last seen, without waiting for it; paused and
// deleted sandboxes are what they are.
func TestMockUsageNeverWaits(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	a := create(t, m, api.CreateSandboxRequest{})
	b := create(t, m, api.CreateSandboxRequest{})
	var counters agent.Counters
	states := func() map[string]int {
		n := map[string]int{}
		for _, u := range m.Usage(nil, counters) {
			n[u.State]++
			if u.MemoryLimitBytes != agent.DefaultMemory || u.Backend != "mock" || u.MemoryBytes != -1 || u.CPUSeconds != -1 {
				t.Errorf("usage %+v", u)
			}
		}
		return n
	}
	if got := states(); got[api.StateRunning] != 2 || len(got) != 1 {
		t.Fatalf("states %v", got)
	}
	release := agent.HoldSandbox(m, a.ID)
	for _, counters = range []agent.Counters{0, agent.MemoryCounter, agent.AllCounters} { // the metrics' reads and the dashboard's
		done := make(chan map[string]int, 1)
		go func() { done <- states() }()
		select {
		case got := <-done:
			if got[api.StateRunning] != 2 {
				t.Errorf("states with one sandbox held (counters %v): %v", counters, got)
			}
		case <-time.After(5 * time.Second):
			release() // let it and the cleanup finish
			<-done
			t.Fatalf("Usage(counters %v) waited for a held sandbox", counters)
		}
	}
	release()
	if err := m.Delete(ctxT(t), b.ID); err != nil {
		t.Fatal(err)
	}
	if got := states(); got[api.StateRunning] != 1 || len(got) != 1 {
		t.Errorf("states after a delete: %v", got)
	}
}
