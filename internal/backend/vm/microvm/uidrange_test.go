package microvm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// TestClaimUIDRange: a state directory keeps its range across claims, two
// state directories get two ranges, the range of a removed state directory
// is handed out again once no process runs under its uids, and a range
// with a process under one of its uids is never handed out.
func TestClaimUIDRange(t *testing.T) {
	reg := t.TempDir()
	mkdir := func(name string) string {
		d := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	running := map[uint32]bool{}
	claim := func(dir string) uint32 {
		t.Helper()
		base, err := claimUIDRange(reg, dir, func() map[uint32]bool { return running }, nil)
		if err != nil {
			t.Fatal(err)
		}
		return base
	}
	a, b := mkdir("a"), mkdir("b")
	ba := claim(a)
	if ba != DefaultUIDBase {
		t.Errorf("first range at %d, want DefaultUIDBase %d", ba, DefaultUIDBase)
	}
	if again := claim(a); again != ba {
		t.Errorf("state directory %s claimed %d, then %d", a, ba, again)
	}
	bb := claim(b)
	if bb != ba+2*UIDSlots {
		t.Errorf("second state directory got %d, want the next range %d (a range is a group and %d uids)", bb, ba+2*UIDSlots, UIDSlots)
	}

	// a is removed while one of its VMs still runs: its range stays taken.
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	running[ba+UIDSlots] = true
	if bc := claim(mkdir("c")); bc == ba {
		t.Errorf("a new state directory got range %d, whose uid %d still runs a process", ba, ba+UIDSlots)
	}
	// Its VM gone, the range is handed out again.
	running = map[uint32]bool{}
	if bd := claim(mkdir("d")); bd != ba {
		t.Errorf("a new state directory got %d, want the removed one's range %d", bd, ba)
	}
	// A range nobody registered but with a process under its group.
	running[ba+4*2*UIDSlots] = true
	if be := claim(mkdir("e")); be != ba+3*2*UIDSlots {
		t.Errorf("claim with range 3 free: got %d, want %d", be, ba+3*2*UIDSlots)
	}
	if bf := claim(mkdir("f")); bf != ba+5*2*UIDSlots {
		t.Errorf("claim with range 4 running a process: got %d, want range 5 (%d)", bf, ba+5*2*UIDSlots)
	}
}

// TestReleasedRangeCgroupsRemoved: a claim releases the range of a removed
// state directory under whose uids nothing runs: its VM cgroups and their
// parent go from every controller, and so does its registry file. A range
// whose cgroup still holds a process keeps both until it is empty.
func TestReleasedRangeCgroupsRemoved(t *testing.T) {
	needVM(t)
	reg := t.TempDir()
	const n = uidRanges - 1 // a range no driver of the real registry reaches
	base := rangeBase(n)
	h, err := cgroups.Detect("/sys/fs/cgroup", cgroups.WithParent(vmCgroupParent(base)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	g, err := h.Create("vms-sb-gone", cgroups.Limits{PidsMax: 8})
	if err != nil {
		t.Fatal(err)
	}
	busy := exec.Command("/bin/sleep", "60")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		busy.Process.Kill()
		busy.Wait()
		g.Delete(context.Background())
		h.RemoveParent()
	}()
	if err := g.AddProc(busy.Process.Pid); err != nil {
		t.Fatal(err)
	}
	parentDirs, err := filepath.Glob("/sys/fs/cgroup/*/" + vmCgroupParent(base))
	if err != nil || len(parentDirs) == 0 {
		t.Fatalf("the range's cgroup parent is in no controller (%v)", err)
	}
	gone := filepath.Join(t.TempDir(), "gone")
	file := filepath.Join(reg, strconv.Itoa(n))
	if err := os.WriteFile(file, []byte(gone+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noneRunning := func() map[uint32]bool { return map[uint32]bool{} }
	claim := func() {
		t.Helper()
		if _, err := claimUIDRange(reg, t.TempDir(), noneRunning, releaseRangeCgroups); err != nil {
			t.Fatal(err)
		}
	}

	claim()
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the registry file of a range whose cgroup holds process %d was removed: %v", busy.Process.Pid, err)
	}
	for _, d := range parentDirs {
		if _, err := os.Stat(filepath.Join(d, "vms-sb-gone")); err != nil {
			t.Errorf("a VM cgroup holding process %d was removed: %v", busy.Process.Pid, err)
		}
	}

	busy.Process.Kill()
	busy.Wait()
	testwait.For(t, 10*time.Second, "the killed process leaves its cgroup", func() bool {
		procs, err := g.Procs()
		return err == nil && len(procs) == 0
	})
	claim()
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the released range's registry file is still there: %v", err)
	}
	for _, d := range parentDirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the released range's cgroup parent %s is still there: %v", d, err)
		}
	}
}
