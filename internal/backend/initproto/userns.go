package initproto

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// IDMap maps a sandbox's user and group IDs 0..Size-1 to the host IDs
// HostID..HostID+Size-1 (one map for both).
type IDMap struct {
	HostID uint32
	Size   uint32
}

func (m *IDMap) validate() error {
	if m.HostID == 0 || m.Size == 0 || uint64(m.HostID)+uint64(m.Size) > 1<<32-1 {
		return fmt.Errorf("initproto: bad id map %d+%d (host id 0 is host root)", m.HostID, m.Size)
	}
	return nil
}

// clampRange limits a "LOW HIGH" group range to the mapped IDs (the
// kernel refuses unmapped ones); a range it cannot parse is left as it is.
func (m *IDMap) clampRange(r string) string {
	var lo, hi uint64
	if n, err := fmt.Sscanf(r, "%d %d", &lo, &hi); err != nil || n != 2 {
		return r
	}
	hi = min(hi, uint64(m.Size)-1)
	lo = min(lo, hi)
	return fmt.Sprintf("%d %d", lo, hi)
}

// sysProcMaps is the map in the form the clone wants: the parent writes it
// into the child's uid_map and gid_map before the child execs the init.
func (m *IDMap) sysProcMaps() []syscall.SysProcIDMap {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.HostID), Size: int(m.Size)}}
}

// syncPair is the sync channel of an init in a user namespace: a unix
// socket pair, so the go-ahead byte can carry the idmapped lower mounts.
func syncPair() (r, w *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("initproto: socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "sync-init"), os.NewFile(uintptr(fds[1]), "sync-parent"), nil
}

// idmapLowers clones each lower directory into a detached mount idmapped
// through the user namespace of init pid: files owned by host uid 0 show as
// owned by the namespace's 0, and so on. Only a process privileged over the
// layers' file systems (this one, not the init) can make them.
func idmapLowers(pid int, lowers []string) (fds []int, err error) {
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open user namespace of init %d: %w", pid, err)
	}
	defer unix.Close(ns)
	defer func() {
		if err != nil {
			closeFDs(fds)
			fds = nil
		}
	}()
	for _, l := range lowers {
		fd, err := unix.OpenTree(unix.AT_FDCWD, l, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fds, fmt.Errorf("clone lower %s: %w", l, err)
		}
		fds = append(fds, fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NODEV |
			unix.MOUNT_ATTR_NOSUID, Userns_fd: uint64(ns)}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			return fds, fmt.Errorf("idmap lower %s: %w", l, err)
		}
	}
	return fds, nil
}

// sendSync sends the go-ahead byte, with the idmapped lowers in a user
// namespace.
func sendSync(cfg *SpawnConfig, w *os.File, pid int) error {
	if cfg.UserNS == nil && !cfg.template {
		_, err := w.Write([]byte{1})
		return err
	}
	var fds []int
	var err error
	if cfg.template {
		fds, err = templateFDs(cfg)
	} else {
		fds, err = idmapLowers(pid, cfg.Lower)
	}
	if err != nil {
		return err
	}
	defer closeFDs(fds)
	rc, err := w.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte{1}, unix.UnixRights(fds...), nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil {
		return err
	}
	return serr
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
