package microvm

import (
	"os"
	"path/filepath"
	"testing"
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
		base, err := claimUIDRange(reg, dir, func() map[uint32]bool { return running })
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
