package agent_test

import (
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestMockUsageOf: every sandbox, or the named ones (unknown IDs left out),
// with its limits; the mock reports no use (-1).
func TestMockUsageOf(t *testing.T) {
	m := newMockEnv(t).open(t)
	a := create(t, m, api.CreateSandboxRequest{Backend: "mock", CPU: 0.5, MemoryBytes: 256 << 20})
	create(t, m, api.CreateSandboxRequest{Backend: "mock"})
	if got := m.UsageOf(nil); len(got) != 2 {
		t.Fatalf("UsageOf(all) = %+v, want 2", got)
	}
	got := m.UsageOf([]string{a.ID, "sb-0000000000000000.test"})
	if len(got) != 1 {
		t.Fatalf("UsageOf(a, unknown) = %+v", got)
	}
	u := got[0]
	if u.ID != a.ID || u.State != api.StateRunning || u.CPULimit != 0.5 || u.MemoryLimit != 256<<20 ||
		u.MemoryBytes != -1 || u.CPUTime != -1 {
		t.Errorf("usage %+v", u)
	}
}

// TestUsageOfContainer: a container sandbox that burns CPU and holds memory
// shows both.
func TestUsageOfContainer(t *testing.T) {
	m := newEnv(t).open(t, nil)
	sb := create(t, m, api.CreateSandboxRequest{})
	idle := m.UsageOf([]string{sb.ID})
	if len(idle) != 1 || idle[0].MemoryBytes <= 0 || idle[0].CPUTime < 0 {
		t.Fatalf("idle usage %+v, want memory and CPU time known", idle)
	}
	shOK(t, m, sb.ID, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; head -c 8000000 /dev/zero > /dev/shm/fill")
	busy := m.UsageOf([]string{sb.ID})[0]
	if busy.CPUTime-idle[0].CPUTime < 50*time.Millisecond {
		t.Errorf("CPU time %v -> %v after a busy loop", idle[0].CPUTime, busy.CPUTime)
	}
	if busy.MemoryBytes-idle[0].MemoryBytes < 7<<20 {
		t.Errorf("memory %d -> %d after filling 8 MB of /dev/shm", idle[0].MemoryBytes, busy.MemoryBytes)
	}
}
