package initproto

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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

// spawnArgs are the init's arguments for its spawn mode: it clones the
// real init into new user, mount, PID, UTS, IPC and network namespaces with
// CLONE_PARENT (so the init is this process's child) and writes this map.
// Go's ForkExec cannot vfork a child whose uid_map the parent must write
// before it execs, so cloning with CLONE_NEWUSER from here would copy this
// whole process (about 0.9 ms for a node agent); the spawn mode forks a
// process of a few pages instead.
func (m *IDMap) spawnArgs(initPath string) []string {
	return []string{"dsec-init", "spawn", strconv.FormatUint(uint64(m.HostID), 10), strconv.FormatUint(uint64(m.Size), 10), initPath}
}

// spawnedInit reads the "PID n" line the spawn mode writes on the status
// pipe (byte by byte: the init's own status line follows), reaps the
// spawner and returns the init's pid. On error the init, if there is one,
// is killed and reaped.
func spawnedInit(ctx context.Context, status *os.File, spawner int) (int, error) {
	stop := watchCtx(ctx, status.SetReadDeadline)
	var line []byte
	b := make([]byte, 1)
	var rerr error
	for len(line) < 64 {
		n, err := status.Read(b)
		if n == 1 && b[0] == '\n' {
			break
		}
		line = append(line, b[:n]...)
		if err != nil {
			rerr = ctxErr(ctx, err)
			break
		}
	}
	stop()
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(spawner, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	pid, perr := strconv.Atoi(strings.TrimPrefix(string(line), "PID "))
	if !strings.HasPrefix(string(line), "PID ") || perr != nil || pid <= 0 {
		if msg, ok := strings.CutPrefix(string(line), "ERR "); ok {
			return 0, fmt.Errorf("initproto: init setup failed: %s", msg)
		}
		return 0, fmt.Errorf("initproto: spawn: no init pid (%q, exit %v, read: %v)", line, ws, rerr)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		rest, _ := readStatus(ctx, status)
		killAndReap(pid)
		return 0, fmt.Errorf("initproto: spawn of init %d failed (%v): %s", pid, ws, strings.TrimPrefix(rest, "ERR "))
	}
	return pid, nil
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
	if cfg.UserNS == nil {
		_, err := w.Write([]byte{1})
		return err
	}
	fds, err := idmapLowers(pid, cfg.Lower)
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
