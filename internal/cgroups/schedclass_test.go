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

// TestSetProcessClass: the Hierarchy's slices (WithSlices) are what a new
// process of each class gets, as SetIdle gives a group's threads; an LS
// process with the kernel's default slice is left as it is.
func TestSetProcessClass(t *testing.T) {
	const ls, be = 300 * time.Microsecond, 2 * time.Millisecond
	h := &Hierarchy{}
	if err := WithSlices(ls, be)(h); err != nil {
		t.Fatal(err)
	}
	if gotLS, gotBE := h.Slices(); gotLS != ls || gotBE != be {
		t.Fatalf("Slices %v %v, want %v %v", gotLS, gotBE, ls, be)
	}
	if err := WithSlices(-1, 0)(h); err == nil {
		t.Errorf("a negative slice accepted")
	}
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
		if err := h.SetProcessClass(tid, true); err != nil {
			t.Error(err)
		}
		if p, _ := SchedPolicy(tid); p != unix.SCHED_IDLE {
			t.Errorf("BE policy %d, want SCHED_IDLE", p)
		}
		// (the kernel keeps SCHED_IDLE threads at the base slice)
		if err := h.SetProcessClass(tid, false); err != nil {
			t.Error(err)
		}
		if p, _ := SchedPolicy(tid); p != unix.SCHED_NORMAL {
			t.Errorf("LS policy %d, want SCHED_NORMAL", p)
		}
		if got, _ := SchedSlice(tid); base > 0 && got != ls {
			t.Errorf("LS slice %v, want %v", got, ls)
		}
		// the kernel's default LS slice: nothing to change
		if err := (&Hierarchy{}).SetProcessClass(tid, false); err != nil {
			t.Error(err)
		}
		if got, _ := SchedSlice(tid); base > 0 && got != ls {
			t.Errorf("LS with the default slice changed the slice to %v", got)
		}
	}()
	<-done
}
