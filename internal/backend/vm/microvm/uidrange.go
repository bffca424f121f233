package microvm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// VM uid ranges. Every driver on a host (two dsec nodes side by side, a
// node's microvm and fullvm backends, the test drivers of several packages)
// runs its VMs under uids of its own: it claims a range in a host-wide
// registry directory, one file per range naming the state directory that
// holds it. A driver started again on the same state directory gets the
// same range back (its VMs, which outlive it, keep their uids); a range is
// handed to another state directory only when the one it names is gone (or
// it names none) and no process runs under any of its uids.

// DefaultUIDRegistry is the host-wide directory of claimed uid ranges (on
// /run: a new boot, which has no VMs, starts without it).
const DefaultUIDRegistry = "/run/dsec-vmuids"

// uidStride separates two ranges: a range's group is its base, its VMs'
// uids base+1 .. base+UIDSlots.
const uidStride = 2 * UIDSlots

// uidRanges is how many ranges the registry hands out (from
// DefaultUIDBase, all below 2^32-2^16).
const uidRanges = 1024

// rangeBase is the first uid (the group) of range n.
func rangeBase(n int) uint32 { return DefaultUIDBase + uint32(n)*uidStride }

// claimUIDRange returns the base of stateDir's range in the registry dir,
// claiming a free one when stateDir holds none; uids lists the uids
// processes run as (processUIDs). The registry's lock file serializes
// claims across processes. Ranges whose state directory is gone and under
// whose uids no process runs are released on the way: release (nil for
// none) removes what the range left on the host (its cgroup parent), and
// the range's registry file goes when that succeeds.
func claimUIDRange(dir, stateDir string, uids func() map[uint32]bool, release func(base uint32) error) (uint32, error) {
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("microvm: uid registry: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, fmt.Errorf("microvm: uid registry: %w", err)
	}
	defer lock.Close()
	for {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("microvm: uid registry lock: %w", err)
	}
	owners := make([]string, uidRanges)
	mine := -1
	for n := range owners {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(n)))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("microvm: uid registry: %w", err)
		}
		owners[n] = strings.TrimSpace(string(b))
		if owners[n] == stateDir {
			mine = n
		}
	}
	var running map[uint32]bool
	free := func(n int) bool {
		if owner := owners[n]; owner != "" {
			if _, err := os.Stat(owner); err == nil || !errors.Is(err, os.ErrNotExist) {
				return false
			}
		}
		// A range nobody holds may still have VMs running (of a
		// state directory removed under them, or of a dsec that
		// predates the registry).
		if running == nil {
			running = uids()
		}
		return !rangeInUse(running, rangeBase(n))
	}
	for n, owner := range owners {
		if owner == "" || n == mine || !free(n) {
			continue
		}
		if release != nil {
			if err := release(rangeBase(n)); err != nil {
				continue // tried again at the next claim
			}
		}
		if err := os.Remove(filepath.Join(dir, strconv.Itoa(n))); err == nil {
			owners[n] = ""
		}
	}
	if mine >= 0 {
		return rangeBase(mine), nil
	}
	for n := range owners {
		if !free(n) {
			continue
		}
		p := filepath.Join(dir, strconv.Itoa(n))
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(stateDir+"\n"), 0o600); err != nil {
			return 0, fmt.Errorf("microvm: uid registry: %w", err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return 0, fmt.Errorf("microvm: uid registry: %w", err)
		}
		return rangeBase(n), nil
	}
	return 0, fmt.Errorf("microvm: all %d VM uid ranges in %s are taken", uidRanges, dir)
}

// processUIDs is the set of uids the host's processes run as.
func processUIDs() map[uint32]bool {
	uids := map[uint32]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if fi, err := e.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				uids[st.Uid] = true
			}
		}
	}
	return uids
}

// rangeInUse reports whether a uid of the range at base is in uids.
func rangeInUse(uids map[uint32]bool, base uint32) bool {
	for u := range uids {
		if u >= base && u <= base+UIDSlots {
			return true
		}
	}
	return false
}
