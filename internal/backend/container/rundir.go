package container

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/initbin"
)

// The run dir holds every sandbox's control socket and mountpoints (root and
// writable-layer directories, unused once the init pivoted). Creating and
// deleting thousands of those on a disk file system is slow: on an ext4
// without a journal every new inode skips the ones deleted in the last 5-35 s
// (recently_deleted), which profiles showed taking a sixth of the server's CPU
// per create with a few thousand sandboxes. So when the default run dir is not
// on a memory file system the driver mounts a small tmpfs of its own there and
// unmounts it once no sandbox is left; a restarted server finds it in place.

// runTmpfsSize bounds the run dir tmpfs (sockets and empty directories, and
// the init binary for user-namespace sandboxes).
const runTmpfsSize = "64m"

// onMemoryFS reports whether dir is on a tmpfs or ramfs.
func onMemoryFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && (st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC)
}

// mountRunTmpfs mounts the driver's tmpfs on dir unless dir already is on a
// memory file system. It reports whether it mounted one.
func mountRunTmpfs(dir string) (bool, error) {
	if onMemoryFS(dir) {
		return false, nil
	}
	if err := unix.Mount("dsec-run", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		"mode=0700,size="+runTmpfsSize); err != nil {
		return false, fmt.Errorf("container: mount tmpfs on run dir %s: %w", dir, err)
	}
	// private: the sandboxes' sockets and mountpoints need not propagate
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return false, fmt.Errorf("container: make run dir %s private: %w", dir, err)
	}
	return true, nil
}

// unmountRunTmpfs detaches the driver's tmpfs from dir if nothing is left in
// it (no sandbox socket or mountpoint: every sandbox is gone). Copies of the
// init (this build's or an earlier one's) do not count: no sandbox runs.
func unmountRunTmpfs(dir string) error {
	if !onMemoryFS(dir) {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), initbin.NamePrefix) {
			return nil
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return nil
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("container: unmount run dir tmpfs %s: %w", dir, err)
	}
	return nil
}
