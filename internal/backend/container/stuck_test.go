package container

import (
	"os"
	"strings"
	"testing"
)

// TestStuckReport: the report names a live task's command, state and wait
// channel, and says "?" for a task that is gone.
func TestStuckReport(t *testing.T) {
	got := stuckReport(os.Getpid(), nil)
	if !strings.HasPrefix(got, "init ") || !strings.Contains(got, "container.test") || !strings.Contains(got, "wchan=") {
		t.Errorf("report of this process: %q", got)
	}
	if got := taskSummary(1 << 30); got != "? ? wchan=?" {
		t.Errorf("report of a missing task: %q", got)
	}
}
