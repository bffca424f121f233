package container

import (
	"os/exec"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// TestDoneAfterEarlyExit: an init that exits before (or while) its
// instance starts watching it still closes Done and, being our child, is
// reaped. The watch must look at the pidfd itself: the poller's readiness
// for it is reset when the watch starts waiting, so an exit reported to
// the poller before then would be lost, leaving Done open and the init a
// zombie that nobody waits for.
func TestDoneAfterEarlyExit(t *testing.T) {
	d := &Driver{}
	for i := range 200 {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start sleep: %v", err)
		}
		pid := cmd.Process.Pid
		start, err := initproto.ReadStartTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // dead before the watch: a zombie only we can reap
			_ = cmd.Process.Kill()
			testwait.For(t, 10*time.Second, "the killed sleep dead", func() bool { return !initproto.Alive(pid, start) })
		}
		in, err := d.newInstance(driver.Spec{ID: "early"}, state{PID: pid, StartTime: start}, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		_ = cmd.Process.Kill() // odd tries: killed right after the watch started
		select {
		case <-in.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("try %d: Done not closed 10 s after the init exited (zombie: %v)", i, !initproto.Alive(pid, start))
		}
		if _, err := initproto.ReadStartTime(pid); err == nil {
			t.Fatalf("try %d: the exited init was not reaped", i)
		}
		in.pidfd.Close()
	}
}
