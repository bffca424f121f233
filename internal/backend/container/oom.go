package container

import "sync/atomic"

// unknownOOMs marks a command whose start count is not known (a re-attached
// process, an unreadable counter): it is never reported as killed by OOM.
const unknownOOMs = ^uint64(0)

// oomTally tells whether the kernel's OOM killer killed something in a
// sandbox while a command ran, with one read of the cgroup's counter per
// command, at its end: a command starts from the count the last end read (or
// the sandbox's first read). A process killed between two commands (one left
// running in the background) is reported on the next command's end, as a
// concurrent command's kill is.
type oomTally struct {
	read func() (uint64, error)
	last atomic.Uint64 // the count last read, plus one; 0: not read yet
}

// start is the count a command starting now compares its end with.
func (t *oomTally) start() uint64 {
	if v := t.last.Load(); v != 0 {
		return v - 1
	}
	n, err := t.read()
	if err != nil {
		return unknownOOMs
	}
	t.note(n)
	return n
}

// killedSince reports whether the count grew past before (a command's start),
// and keeps what it read for the next command.
func (t *oomTally) killedSince(before uint64) bool {
	if before == unknownOOMs {
		return false
	}
	n, err := t.read()
	if err != nil {
		return false
	}
	t.note(n)
	return n > before
}

// note keeps n unless a later read already saw more.
func (t *oomTally) note(n uint64) {
	for {
		v := t.last.Load()
		if v >= n+1 || t.last.CompareAndSwap(v, n+1) {
			return
		}
	}
}
