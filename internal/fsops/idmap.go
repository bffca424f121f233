package fsops

import (
	"os"
	"runtime"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// IDMap is the ID mapping of a sandbox in a user namespace: its IDs
// 0..Size-1 are host IDs HostID..HostID+Size-1. The zero IDMap is the
// identity (no user namespace).
type IDMap struct {
	HostID, Size uint32
}

// NewMapped is New for a sandbox in a user namespace: what FS creates is
// owned by the sandbox's root (or, for tar entries, by the entry's owner
// mapped into the range) rather than by host root, and FileInfo shows IDs
// as the sandbox sees them (65534 for an unmapped one).
func NewMapped(root *os.File, m IDMap) *FS { return &FS{root: root, ids: m} }

// hostID is the host ID of sandbox ID id; ok is false when it is outside
// the range.
func (f *FS) hostID(id int) (int, bool) {
	if f.ids.Size == 0 {
		return id, true
	}
	if id < 0 || uint64(id) >= uint64(f.ids.Size) {
		return 0, false
	}
	return int(f.ids.HostID) + id, true
}

// own gives a freshly created entry name of dirfd the sandbox root's owner
// (nothing to do without a user namespace: host root is its root).
func (f *FS) own(dirfd int, name string) error {
	if f.ids.Size == 0 {
		return nil
	}
	return unix.Fchownat(dirfd, name, int(f.ids.HostID), int(f.ids.HostID), unix.AT_SYMLINK_NOFOLLOW)
}

// ownFD is own for an open fd.
func (f *FS) ownFD(fd int) error {
	if f.ids.Size == 0 {
		return nil
	}
	return unix.Fchown(fd, int(f.ids.HostID), int(f.ids.HostID))
}

// shown maps the IDs of fi to what the sandbox sees.
func (f *FS) shown(fi api.FileInfo) api.FileInfo {
	if f.ids.Size == 0 {
		return fi
	}
	fi.UID, fi.GID = f.sandboxID(fi.UID), f.sandboxID(fi.GID)
	return fi
}

func (f *FS) sandboxID(host int) int {
	if host >= int(f.ids.HostID) && host < int(f.ids.HostID)+int(f.ids.Size) {
		return host - int(f.ids.HostID)
	}
	return 65534 // the kernel's overflow id
}

// AsRoot runs fn with this thread's file-system IDs those of the root of
// a sandbox with map m (see asRoot), for host code that creates files
// through an instance's Root itself; the zero map runs fn as it is.
func AsRoot(m IDMap, fn func() error) error { return (&FS{ids: m}).asRoot(fn) }

// asRoot runs fn with this thread's file-system IDs set to the sandbox's
// root: a file system a user namespace mounted (the overlay root, the
// writable layer) refuses to create files for an ID it cannot map, such as
// host root (EOVERFLOW). The thread keeps its capabilities (setfsuid drops
// the file ones from the effective set; they are raised again), so
// permission checks are host root's, as without a user namespace. The IDs
// are per thread, so the goroutine is locked to it; should restoring them
// fail, the thread stays locked and exits with the goroutine.
func (f *FS) asRoot(fn func() error) error {
	if f.ids.Size == 0 {
		return fn()
	}
	runtime.LockOSThread()
	id := int(f.ids.HostID)
	// setfs[ug]id return the previous ID; -1 changes nothing, so it reads
	// the current one
	cur := func() (int, int) {
		u, _ := unix.SetfsuidRetUid(-1)
		g, _ := unix.SetfsgidRetGid(-1)
		return u, g
	}
	restore := func() bool {
		unix.SetfsuidRetUid(0)
		unix.SetfsgidRetGid(0)
		u, g := cur()
		return u == 0 && g == 0
	}
	unix.SetfsgidRetGid(id)
	unix.SetfsuidRetUid(id)
	if u, g := cur(); u != id || g != id {
		if restore() {
			runtime.UnlockOSThread()
		}
		return errdefs.Internal(nil, "set file-system ids to %d", id)
	}
	if err := raiseEffective(); err != nil {
		if restore() {
			runtime.UnlockOSThread()
		}
		return errdefs.Internal(err, "keep capabilities under fsuid %d", id)
	}
	err := fn()
	if restore() {
		runtime.UnlockOSThread()
	}
	return err
}

// raiseEffective sets this thread's effective capabilities to its
// permitted ones.
func raiseEffective() error {
	h := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&h, &d[0]); err != nil {
		return err
	}
	for i := range d {
		d[i].Effective = d[i].Permitted
	}
	return unix.Capset(&h, &d[0])
}
