package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
)

// slowParent starts a stand-in for QEMU (a sleep, our child) whose parent
// reaps it only 300 ms after it died, as a busy agent or init may: between
// death and reaping the process is a zombie that still has its pid. It
// returns the process's state as a re-adopted instance records it.
func slowParent(t *testing.T) state {
	t.Helper()
	cmd, pid, start := standIn(t)
	reapedc := make(chan struct{})
	go func() {
		defer close(reapedc)
		for alive(pid, start) {
			time.Sleep(2 * time.Millisecond) // poll for the death; the test's cleanup kills it at the latest
		}
		time.Sleep(300 * time.Millisecond) // the slow parent
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-reapedc
	})
	return state{PID: pid, StartTime: start, Dir: t.TempDir()}
}

// standIn starts a stand-in for QEMU (a long sleep, our child) and returns
// it with its pid and start time.
func standIn(t *testing.T) (*exec.Cmd, int, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	start, err := initproto.ReadStartTime(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	return cmd, cmd.Process.Pid, start
}

// gone fails the test if pid still is in the process table.
func gone(t *testing.T, what string, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("%s returned with QEMU (pid %d) still in the process table (kill 0: %v)", what, pid, err)
	}
}

// TestDestroyWaitsForReap: Destroy of a re-adopted VM (its Done closes when
// QEMU dies) and Cleanup return only when QEMU has been reaped, not when it
// has died: a caller told "destroyed" finds no process left, zombie or not.
func TestDestroyWaitsForReap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	st := slowParent(t)
	in := &instance{id: "reap", st: st, done: make(chan struct{})}
	watchPid(st.PID, st.StartTime, in.done)
	if err := in.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	gone(t, "Destroy", st.PID)
	if _, err := os.Stat(st.Dir); !os.IsNotExist(err) {
		t.Errorf("Destroy left %s (%v)", st.Dir, err)
	}
	if !driver.Exited(in) {
		t.Error("Done not closed after Destroy")
	}

	st = slowParent(t)
	if err := (&Driver{}).Cleanup(ctx, driver.Spec{ID: "reap"}, json.RawMessage(st.raw())); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	gone(t, "Cleanup", st.PID)
}

// TestDestroyDeadline: a QEMU that nobody reaps makes Destroy fail when its
// context ends, instead of claiming the VM is gone.
func TestDestroyDeadline(t *testing.T) {
	cmd, pid, start := standIn(t)
	defer func() { _ = cmd.Wait() }() // reaped only after Destroy gave up
	in := &instance{id: "noreap", st: state{PID: pid, StartTime: start, Dir: t.TempDir()}, done: make(chan struct{})}
	watchPid(pid, start, in.done)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := in.Destroy(ctx); err == nil {
		t.Fatal("Destroy succeeded while QEMU was an unreaped zombie")
	} else {
		t.Logf("Destroy: %v", err)
	}
}
