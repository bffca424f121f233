package initproto

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// The paths of an init cloned from a spawner's template namespace (see
// Spawner): its root and writable-layer mountpoints are the template's own
// empty directories (csrc/init/spawner.h).
const (
	templateRoot = "/root"
	templateRW   = "/rw"
)

// templateFDs clones what an init in the template namespace cannot reach by
// path, in the order it takes them with the sync byte: each lower (a detached
// clone of its mount, as overlayfs would clone it from the path), then, with
// a shared sysfs, a recursive clone of it and its network namespace's file.
func templateFDs(cfg *SpawnConfig) (fds []int, err error) {
	defer func() {
		if err != nil {
			closeFDs(fds)
			fds = nil
		}
	}()
	for _, l := range cfg.Lower {
		fd, err := unix.OpenTree(unix.AT_FDCWD, l, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fds, fmt.Errorf("clone lower %s: %w", l, err)
		}
		fds = append(fds, fd)
	}
	if cfg.SysfsPath == "" {
		return fds, nil
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, cfg.SysfsPath, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fds, fmt.Errorf("clone shared sysfs: %w", err)
	}
	fds = append(fds, fd)
	fd, err = unix.Open(SysfsNetnsPath(cfg.SysfsPath), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fds, fmt.Errorf("open shared sysfs network namespace: %w", err)
	}
	return append(fds, fd), nil
}
