package trajectory

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Pebble treats a failed WAL write as fatal (it exits the process: "fatal
// commit error"), so a full data disk must never reach it. The store keeps a
// reserve of free space on its file system: a started mark (Begin) is refused
// with resource_exhausted once free space is under the reserve, and a durable
// write (Finish, Abort, Delete, ...) once it is under a quarter of it, so the
// steps already begun can still finish and trajectories can still be deleted
// after new steps are refused. The WAL, a memtable flush and a compaction
// then all find room.

// DefaultDiskReserve is the free space the Pebble store keeps (PebbleOptions.DiskReserve).
const DefaultDiskReserve = 16 << 20

// diskFullRetryAfter is the Retry-After of a write refused for space.
const diskFullRetryAfter = 5 * time.Second

// roomSlack and roomRecheck: while the file system had more than roomSlack
// beyond the reserve free, room counts with that figure less roomSlack for
// roomRecheck instead of asking the kernel on every commit (a statfs per step
// showed in profiles). Closer to the reserve it asks every time.
const (
	roomSlack   = 256 << 20
	roomRecheck = 50 * time.Millisecond
)

// roomSeen is a free-space figure room may use until a time.
type roomSeen struct {
	free  int64 // what statfs said, less roomSlack
	until time.Time
}

// room refuses a commit of size bytes when the log's file system is too full.
func (p *Pebble) room(size int, durable bool) error {
	var free int64
	if c := p.roomSeen.Load(); c != nil && time.Now().Before(c.until) {
		free = c.free
	} else {
		var st unix.Statfs_t
		if err := unix.Statfs(p.dir, &st); err != nil {
			return nil // cannot tell: let Pebble try
		}
		free = int64(st.Bavail) * int64(st.Bsize)
		if free > p.reserve+roomSlack {
			p.roomSeen.Store(&roomSeen{free: free - roomSlack, until: time.Now().Add(roomRecheck)})
		} else {
			p.roomSeen.Store(nil)
		}
	}
	keep := p.reserve
	if durable {
		keep /= 4
	}
	if free < keep+int64(size) {
		return errdefs.Exhausted(diskFullRetryAfter, "%s", fmt.Sprintf(
			"trajectory log: its disk is full (%d KiB free; the log keeps %d KiB in reserve)", free>>10, keep>>10))
	}
	return nil
}

// logError classifies an error of the log's storage: a refusal for space
// stays resource_exhausted, anything else is internal.
func logError(err error) error {
	if _, ok := errdefs.RetryAfter(err); ok {
		return err
	}
	return errdefs.Internal(err, "trajectory log")
}
