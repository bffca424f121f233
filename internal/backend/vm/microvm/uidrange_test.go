package microvm

import (
	"os"
	"path/filepath"
	"testing"
)

// TestClaimUIDRange: a state directory keeps its range across claims, two
// state directories get two ranges, and the range of a removed state
// directory (no process under its uids) is handed out again.
func TestClaimUIDRange(t *testing.T) {
	reg := t.TempDir()
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(dir string) uint32 {
		t.Helper()
		base, err := claimUIDRange(reg, dir)
		if err != nil {
			t.Fatal(err)
		}
		return base
	}
	ba := claim(a)
	if again := claim(a); again != ba {
		t.Errorf("state directory %s claimed %d, then %d", a, ba, again)
	}
	bb := claim(b)
	if bb == ba {
		t.Errorf("two state directories share the uid range %d", ba)
	}
	if d := int64(bb) - int64(ba); d < 2*UIDSlots && d > -2*UIDSlots {
		t.Errorf("ranges %d and %d overlap (a range is a group and %d uids)", ba, bb, UIDSlots)
	}
	if ba != DefaultUIDBase {
		t.Errorf("first range at %d, want DefaultUIDBase %d", ba, DefaultUIDBase)
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(t.TempDir(), "c")
	if err := os.Mkdir(c, 0o700); err != nil {
		t.Fatal(err)
	}
	if bc := claim(c); bc != ba {
		t.Errorf("a new state directory got %d, want the removed one's range %d", bc, ba)
	}
	if rangeInUse(map[uint32]bool{ba + UIDSlots: true}, ba) != true || rangeInUse(map[uint32]bool{ba + UIDSlots + 1: true}, ba) {
		t.Errorf("rangeInUse does not cover exactly base..base+UIDSlots")
	}
}
