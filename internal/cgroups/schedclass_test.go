package cgroups

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSetSchedClass switches a thread of this test between the classes: LS
// asks for the slice (where the kernel has custom slices, 6.12+), BE is
// SCHED_IDLE, and LS again is SCHED_OTHER.
func TestSetSchedClass(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		tid := unix.Gettid()
		base, err := SchedSlice(tid)
		if err != nil {
			t.Error(err)
			return
		}
		const slice = 300 * time.Microsecond
		if err := SetSchedClass(tid, false, slice); err != nil {
			t.Error(err)
			return
		}
		if got, _ := SchedSlice(tid); base > 0 && got != slice {
			t.Errorf("LS slice %v, want %v (base %v)", got, slice, base)
		}
		if err := SetSchedClass(tid, true, slice); err != nil {
			t.Error(err)
		}
		if p, _ := SchedPolicy(tid); p != unix.SCHED_IDLE {
			t.Errorf("BE policy %d, want SCHED_IDLE", p)
		}
		if err := SetSchedClass(tid, false, 0); err != nil {
			t.Error(err)
		}
		if p, _ := SchedPolicy(tid); p != unix.SCHED_NORMAL {
			t.Errorf("LS policy %d, want SCHED_NORMAL", p)
		}
		if got, _ := SchedSlice(tid); got != base {
			t.Errorf("slice after LS with the default: %v, want the base %v", got, base)
		}
	}()
	<-done
}
