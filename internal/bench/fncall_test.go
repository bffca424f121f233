package bench

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

var cpusAllowed = regexp.MustCompile(`Cpus_allowed_list:\s*(\S+)`)

// TestPinnedRunChildHasAllCPUs: the pinned bare spawn, like FnCall's
// helper, gives the child every CPU of the spawning thread before the
// program's first instruction, and leaves the thread as it found it
// (SCHED_OTHER, all CPUs).
func TestPinnedRunChildHasAllCPUs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (the real-time window needs CAP_SYS_NICE)")
	}
	own, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	want := cpusAllowed.FindSubmatch(own)[1]
	runtime.LockOSThread() // pinnedRun runs on this thread: check it afterwards
	defer runtime.UnlockOSThread()
	for range 20 {
		cmd := exec.Command("cat", "/proc/self/status")
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := pinnedRun(cmd); err != nil {
			t.Fatal(err)
		}
		got := cpusAllowed.FindSubmatch(out.Bytes())
		if got == nil || !bytes.Equal(got[1], want) {
			t.Fatalf("child's CPUs %q, want the parent's %q", got, want)
		}
		if p, err := unix.SchedGetAttr(0, 0); err != nil || p.Policy != unix.SCHED_NORMAL {
			t.Fatalf("thread's policy after pinnedRun: %+v, %v", p, err)
		}
		var cpus unix.CPUSet
		if err := unix.SchedGetaffinity(0, &cpus); err != nil || cpus.Count() != runtime.NumCPU() {
			t.Fatalf("thread's CPUs after pinnedRun: %d of %d, %v", cpus.Count(), runtime.NumCPU(), err)
		}
	}
}
