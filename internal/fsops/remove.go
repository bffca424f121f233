package fsops

import (
	"os"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

const (
	// maxRemoveRounds bounds how often a directory is re-emptied when entries keep
	// appearing in it (a process in the sandbox racing the removal).
	maxRemoveRounds = 8
)

// Remove removes a file or an empty directory, or a whole tree when recursive.
// The final component is never followed (removing a symlink removes the link).
// Removing "/" is refused. A recursive removal walks directory fds with
// unlinkat, never following symlinks, and does not descend into mount points below
// path (that is a conflict error, since the mount point cannot be removed).
func (f *FS) Remove(p string, recursive bool) error {
	clean, err := cleanPath(p)
	if err != nil {
		return err
	}
	if clean == "/" {
		return errdefs.Invalid("remove /: refusing to remove the sandbox root")
	}
	dirfd, base, err := f.openParent("remove", clean)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return classify("remove", clean, err)
	}
	if !isType(&st, unix.S_IFDIR) {
		return classify("remove", clean, unix.Unlinkat(dirfd, base, 0))
	}
	if !recursive {
		err := unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR)
		if err == unix.ENOTEMPTY || err == unix.EEXIST {
			return errdefs.Wrap(api.CodeConflict, err, "remove %s: directory not empty", clean)
		}
		return classify("remove", clean, err)
	}
	return removeTree(dirfd, base, clean, false)
}

// removeTree removes entry name of dirfd (shown as p) and everything below it.
// Directories are opened with O_NOFOLLOW|RESOLVE_NO_SYMLINKS (and, below the top,
// RESOLVE_NO_XDEV), so a symlink is unlinked, never followed, even if a directory is
// swapped for one mid-walk.
func removeTree(dirfd int, name, p string, child bool) error {
	resolve := uint64(beneathNoLinks)
	if child {
		resolve |= unix.RESOLVE_NO_XDEV
	}
	for round := 0; round < maxRemoveRounds; round++ {
		err := unix.Unlinkat(dirfd, name, 0)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EISDIR {
			return classify("remove", p, err)
		}
		fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolve)
		switch {
		case err == unix.ENOENT:
			return nil
		case err == unix.ELOOP || err == unix.ENOTDIR:
			continue // swapped for a non-directory: unlink it next round
		case err == unix.EXDEV:
			return errdefs.Wrap(api.CodeConflict, err, "remove %s: is a mount point", p)
		case err != nil:
			return classify("remove", p, err)
		}
		if err := emptyDir(fd, p); err != nil {
			return err
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		switch {
		case err == nil || err == unix.ENOENT:
			return nil
		case err == unix.ENOTEMPTY || err == unix.EEXIST:
			continue
		default:
			return classify("remove", p, err)
		}
	}
	return errdefs.Wrap(api.CodeConflict, unix.ENOTEMPTY, "remove %s: entries keep appearing", p)
}

// emptyDir removes every entry of the directory fd (which it closes).
func emptyDir(fd int, p string) error {
	dir := os.NewFile(uintptr(fd), p)
	defer dir.Close()
	for round := 0; round < maxRemoveRounds; round++ {
		if round > 0 {
			if _, err := dir.Seek(0, 0); err != nil {
				return classify("remove", p, err)
			}
		}
		names, err := dir.Readdirnames(-1)
		if err != nil {
			return classify("remove", p, err)
		}
		if len(names) == 0 {
			return nil
		}
		for _, n := range names {
			if err := removeTree(fd, n, p+"/"+n, true); err != nil {
				return err
			}
		}
	}
	return nil
}
