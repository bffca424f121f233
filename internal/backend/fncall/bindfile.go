package fncall

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// A compiled program reaches its run without a copy: the engine makes a
// detached read-only mount of the cached binary (open_tree of the open file,
// mount_setattr) and passes it with the request; the run's helper attaches it
// at the file's place in /w (move_mount) before it takes the seccomp filter
// (flagLateSeccomp). A run reads and executes the cached file in place and
// cannot change it: the mount is read-only, nosuid and nodev, the file is
// root's, a mount point cannot be unlinked or renamed, and the program has no
// capability to unmount. Where the mount cannot be made (no new mount API,
// not privileged) the file is copied, as every other file is.

// bindTrees are the detached mounts of one run's request, closed once sent.
type bindTrees []int

func (t bindTrees) close() {
	for _, fd := range t {
		unix.Close(fd)
	}
}

// fileEntries adds files to r (their "MODE:NAME" entries, "bMODE:NAME" for
// a bind) and their descriptors to fds, and sets flagLateSeccomp when any is
// a bind. It returns the detached mounts it made.
func fileEntries(r *runReq, files []File, fds *[]int) bindTrees {
	var trees bindTrees
	for _, f := range files {
		if f.Bind {
			tree, err := readOnlyTree(f.F.Fd())
			if err == nil {
				trees = append(trees, tree)
				r.files = append(r.files, fmt.Sprintf("b%o:%s", f.Mode&0o7777, f.Name))
				*fds = append(*fds, tree)
				r.flags |= flagLateSeccomp
				continue
			}
		}
		r.files = append(r.files, fmt.Sprintf("%o:%s", f.Mode&0o7777, f.Name))
		*fds = append(*fds, int(f.F.Fd()))
	}
	return trees
}

// readOnlyTree makes a detached read-only, nosuid, nodev mount of the file
// open as fd.
func readOnlyTree(fd uintptr) (int, error) {
	tree, err := unix.OpenTree(int(fd), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return tree, nil
}
