package agent

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fsTopDirFL is FS_TOPDIR_FL of linux/fs.h (chattr +T), which x/sys does not
// name.
const fsTopDirFL = 0x00020000

// prepareLogRoot makes dir, the parent of every sandbox's process log
// directory, and marks it the top of directory hierarchies (chattr +T): ext4
// then spreads the sandboxes' log directories over its block groups (its
// Orlov allocator) rather than putting all of them, and so every process log,
// in the group of their parent. Each background process creates two log
// files, each an inode allocation, and an ext4 without a journal passes over
// the inodes freed in the last seconds to minutes one at a time: with the
// logs of every deleted sandbox freed in one group, a log file cost about
// 0.5 ms of CPU on the reference VM, the largest part of an E2B command's
// server time (docs/performance.md). Best effort: a file system without the
// flag keeps its own placement.
func prepareLogRoot(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil || flags&fsTopDirFL != 0 {
		return nil // no such flags here, or set already
	}
	err = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopDirFL))
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
		return nil
	}
	return err
}
