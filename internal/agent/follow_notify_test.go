package agent

import (
	"path/filepath"
	"testing"
	"time"
)

// TestSubscribeMissingLogs checks that following a process whose logs are
// all gone (its sandbox was deleted: stdout and stderr both missing) answers
// with one pending wake-up instead of blocking the agent's notifier, and that
// the notifier still serves the next subscriber.
func TestSubscribeMissingLogs(t *testing.T) {
	var n logNotifier
	dir := t.TempDir()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ch, stop := n.subscribe(filepath.Join(dir, "gone.stdout"), filepath.Join(dir, "gone.stderr"))
		defer stop()
		if ch != nil {
			select {
			case <-ch:
			default:
				t.Error("no wake-up pending for missing logs")
			}
		}
		_, stop2 := n.subscribe(filepath.Join(dir, "gone.again"))
		stop2()
	}()
	select {
	case <-done:
		n.close()
	case <-time.After(5 * time.Second):
		t.Fatal("subscribe blocked on logs that do not exist")
	}
}
