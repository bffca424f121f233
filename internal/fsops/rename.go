package fsops

import (
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"golang.org/x/sys/unix"
)

// Rename moves the entry from to to, both inside the sandbox, like rename(2): an
// existing file (or empty directory, for a directory) at to is replaced. Neither
// final component is followed (renaming a symlink moves the link; a symlink at to
// is replaced, not written through); both parents are resolved inside the root
// with RESOLVE_IN_ROOT and the move is one renameat2 on the two parent fds, so a
// process in the sandbox swapping a parent for a symlink cannot move anything
// outside. Renaming "/" or onto "/", or a directory into itself, is
// invalid_argument; a missing source is not_found; a non-empty target directory
// is conflict.
func (f *FS) Rename(from, to string) error {
	src, err := cleanPath(from)
	if err != nil {
		return err
	}
	dst, err := cleanPath(to)
	if err != nil {
		return err
	}
	switch {
	case src == "/" || dst == "/":
		return errdefs.Invalid("rename %s to %s: not allowed on the sandbox root", src, dst)
	case src == dst:
		// rename(2) succeeds without doing anything; still report a missing source.
		_, err := f.Stat(src)
		return err
	case strings.HasPrefix(dst, src+"/"):
		return errdefs.Invalid("rename %s to %s: cannot move a directory into itself", src, dst)
	}
	sfd, sbase, err := f.openParent("rename", src)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	dfd, dbase, err := f.openParent("rename", dst)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	for i := 0; ; i++ {
		err = unix.Renameat2(sfd, sbase, dfd, dbase, 0)
		if err != unix.EINTR || i >= 64 {
			break
		}
	}
	if err == unix.EEXIST {
		err = unix.ENOTEMPTY // a non-empty target directory (either errno per POSIX)
	}
	return classify("rename", src+" to "+dst, err)
}
