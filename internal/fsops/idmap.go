package fsops

import (
	"os"

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
