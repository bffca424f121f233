package container

import (
	"errors"
	"testing"
)

// TestOOMTallyOneReadPerCommand: a command's start costs no read of the
// counter once the sandbox has one, its end one read; a kill during a command
// is reported on it and not on the next one.
func TestOOMTallyOneReadPerCommand(t *testing.T) {
	var count uint64 = 3 // a cgroup that saw kills before
	reads := 0
	tl := oomTally{read: func() (uint64, error) { reads++; return count, nil }}

	run := func(kill bool) bool {
		before := tl.start()
		if kill {
			count++
		}
		return tl.killedSince(before)
	}
	if run(false) {
		t.Errorf("a command with no kill reported as killed by OOM")
	}
	if reads != 2 {
		t.Errorf("first command: %d reads, want 2 (the sandbox's first and the end)", reads)
	}
	for i, kill := range []bool{true, false, false, true, true} {
		reads = 0
		if got := run(kill); got != kill {
			t.Errorf("command %d: killed by OOM = %v, want %v", i, got, kill)
		}
		if reads != 1 {
			t.Errorf("command %d: %d reads of the counter, want 1", i, reads)
		}
	}
}

// TestOOMTallyConcurrent: two commands running while one kill happens are
// both told, whichever ends first; one started after the first end is not.
func TestOOMTallyConcurrent(t *testing.T) {
	var count uint64
	tl := oomTally{read: func() (uint64, error) { return count, nil }}
	a, b := tl.start(), tl.start()
	count++
	if !tl.killedSince(b) {
		t.Errorf("b not told")
	}
	c := tl.start()
	if !tl.killedSince(a) {
		t.Errorf("a not told after b's end read the count")
	}
	if tl.killedSince(c) {
		t.Errorf("c, started after the kill was read, blamed for it")
	}
}

// TestOOMTallyUnreadable: no counter, no report (and no panic).
func TestOOMTallyUnreadable(t *testing.T) {
	tl := oomTally{read: func() (uint64, error) { return 0, errors.New("no memory controller") }}
	if before := tl.start(); before != unknownOOMs || tl.killedSince(before) {
		t.Errorf("start %d, want unknownOOMs and no report", before)
	}
	if tl.killedSince(unknownOOMs) {
		t.Errorf("a re-attached process reported as killed by OOM")
	}
}
