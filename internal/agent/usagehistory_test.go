package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestUsageHistory: a container sandbox's usage samples, as E2B's metrics
// series shows them: at most one per api.UsageSamplePeriod (a second request
// within it takes none), oldest first, CPU use since the previous sample,
// memory and the root file system as df sees it; a window returns the samples
// from its start to a period after its end (a past window takes no sample);
// at most 60 are kept.
func TestUsageHistory(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, nil)
	ctx := context.Background()
	sb := create(t, m, api.CreateSandboxRequest{CPU: 1})
	get := func(start, end *time.Time) []api.UsageSample {
		t.Helper()
		s, err := m.UsageHistory(ctx, sb.ID, api.UsageHistoryRequest{Start: start, End: end})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := get(nil, nil)
	if len(first) != 1 {
		t.Fatalf("first request: %d samples, want 1", len(first))
	}
	if s := first[0]; s.MemoryBytes <= 0 || s.DiskTotalBytes <= 0 || s.DiskUsedBytes <= 0 || s.CPULimit != 1 {
		t.Fatalf("sample %+v: want memory, disk and the CPU limit", s)
	}
	if again := get(nil, nil); len(again) != 1 {
		t.Fatalf("a second request within the period: %d samples, want 1", len(again))
	}
	shOK(t, m, sb.ID, "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	e.clock.Advance(api.UsageSamplePeriod)
	two := get(nil, nil)
	if len(two) != 2 || two[1].At.Sub(two[0].At) < api.UsageSamplePeriod {
		t.Fatalf("after a period: %+v, want 2 samples a period apart", two)
	}
	if two[1].CPUPercent <= 0 {
		t.Errorf("CPU %v%% after a busy loop", two[1].CPUPercent)
	}
	past, pastEnd := sb.CreatedAt.Add(-time.Hour), sb.CreatedAt.Add(-30*time.Minute)
	if w := get(&past, &pastEnd); len(w) != 0 {
		t.Errorf("a window before the sandbox: %+v", w)
	}
	if n := len(get(nil, nil)); n != 2 {
		t.Errorf("a past window took a sample: %d", n)
	}
	for range 70 {
		e.clock.Advance(api.UsageSamplePeriod)
		get(nil, nil)
	}
	all := get(nil, nil)
	if len(all) != 60 {
		t.Fatalf("%d samples kept, want 60", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].At.Sub(all[i-1].At) < api.UsageSamplePeriod {
			t.Fatalf("samples %d and %d less than a period apart or not oldest first", i-1, i)
		}
	}
	// up to a period after the end: sample 21 exactly, not 22
	start, end := all[10].At, all[21].At.Add(-api.UsageSamplePeriod)
	if w := get(&start, &end); len(w) != 12 || !w[0].At.Equal(start) || !w[11].At.Equal(all[21].At) {
		t.Errorf("window [10, 21 - period]: %d samples, want the 12 from 10 to 21", len(w))
	}
	if _, err := m.UsageHistory(ctx, "sb-0000000000000000.test", api.UsageHistoryRequest{}); err == nil {
		t.Error("an unknown sandbox has a usage history")
	}
}
