package agent_test

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestMockUsage: every sandbox, or the named ones (unknown IDs left out),
// with its limits; the mock reports no use (-1).
func TestMockUsage(t *testing.T) {
	m := newMockEnv(t).open(t)
	a := create(t, m, api.CreateSandboxRequest{Backend: "mock", CPU: 0.5, MemoryBytes: 256 << 20})
	create(t, m, api.CreateSandboxRequest{Backend: "mock"})
	if got := m.Usage(nil, agent.AllCounters); len(got) != 2 {
		t.Fatalf("Usage(all) = %+v, want 2", got)
	}
	got := m.Usage([]string{a.ID, "sb-0000000000000000.test"}, agent.AllCounters)
	if len(got) != 1 {
		t.Fatalf("Usage(a, unknown) = %+v", got)
	}
	u := got[0]
	if u.ID != a.ID || u.State != api.StateRunning || u.CPULimit != 0.5 || u.MemoryLimitBytes != 256<<20 ||
		u.MemoryBytes != -1 || u.CPUSeconds != -1 {
		t.Errorf("usage %+v", u)
	}
}

// TestUsageContainer: a container sandbox that burns CPU and holds memory
// shows both; without counters, Usage reports the last ones read.
func TestUsageContainer(t *testing.T) {
	m := newEnv(t).open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{})
	idle := m.Usage([]string{sb.ID}, agent.AllCounters)
	if len(idle) != 1 || idle[0].MemoryBytes <= 0 || idle[0].CPUSeconds < 0 {
		t.Fatalf("idle usage %+v, want memory and CPU time known", idle)
	}
	shOK(t, m, sb.ID, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; head -c 8000000 /dev/zero > /dev/shm/fill")
	busy := m.Usage([]string{sb.ID}, agent.AllCounters)[0]
	if busy.CPUSeconds-idle[0].CPUSeconds < 0.05 {
		t.Errorf("CPU time %v -> %v after a busy loop", idle[0].CPUSeconds, busy.CPUSeconds)
	}
	if busy.MemoryBytes-idle[0].MemoryBytes < 7<<20 {
		t.Errorf("memory %d -> %d after filling 8 MB of /dev/shm", idle[0].MemoryBytes, busy.MemoryBytes)
	}
	if cached := m.Usage([]string{sb.ID}, 0)[0]; cached.MemoryBytes != busy.MemoryBytes || cached.CPUSeconds != busy.CPUSeconds {
		t.Errorf("without counters: %+v, want the last read %+v", cached, busy)
	}
}
