package fsops

import (
	"os"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"golang.org/x/sys/unix"
)

const (
	// inRoot resolves a path against the root fd as if it were "/": "..", absolute
	// symlinks and symlink chains all stay inside it; /proc magic links are refused.
	inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	// beneathNoLinks resolves a path strictly below a directory fd without
	// traversing any symlink (used for single names and walks).
	beneathNoLinks = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	// maxSymlinkHops bounds WriteFile's manual following of final symlinks.
	maxSymlinkHops = 40
)

// openat2 is unix.Openat2 with O_CLOEXEC, retrying EINTR and the EAGAIN that
// RESOLVE_IN_ROOT/RESOLVE_BENEATH return when a concurrent rename or mount raced the
// lookup.
func openat2(dirfd int, name string, flags uint64, mode uint32, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode)
	}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, name, &how)
		if (err == unix.EINTR || err == unix.EAGAIN) && i < 64 {
			continue
		}
		return fd, err
	}
}

// openInRoot opens a cleaned sandbox path (following symlinks inside the root).
func (f *FS) openInRoot(clean string, flags uint64) (int, error) {
	return openat2(f.rootFD(), relPath(clean), flags, 0, inRoot)
}

// openParent opens the parent directory of a cleaned path other than "/" as an
// O_PATH fd and returns it with the base name. A missing parent is not_found.
func (f *FS) openParent(op, clean string) (int, string, error) {
	if clean == "/" {
		return -1, "", errdefs.Invalid("%s /: not allowed on the sandbox root", op)
	}
	parent, base := splitPath(clean)
	fd, err := f.openInRoot(parent, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", classify(op, clean, err)
	}
	return fd, base, nil
}

// readlinkat reads a symlink's target, growing the buffer as needed.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// writeTarget is where WriteFile puts its data: a parent directory fd, the base
// name in it, and the lstat of the current entry if one exists.
type writeTarget struct {
	dirfd int
	base  string
	old   *unix.Stat_t
}

// resolveWriteTarget finds the directory entry a write to clean replaces, following
// final symlinks the way the kernel would but with every lookup done by openat2
// with RESOLVE_IN_ROOT: a symlink's target is appended to the (unresolved) path of
// the directory holding it, or replaces it when absolute, so "..", absolute targets
// and chains all resolve inside the root. The caller closes dirfd.
func (f *FS) resolveWriteTarget(clean string) (writeTarget, error) {
	parentClean, base := splitPath(clean)
	parent := relPath(parentClean) // kernel-resolved; may contain ".." and symlinks
	for hops := 0; ; hops++ {
		dirfd, err := openat2(f.rootFD(), parent, unix.O_PATH|unix.O_DIRECTORY, 0, inRoot)
		if err != nil {
			return writeTarget{}, classify("write", clean, err)
		}
		var st unix.Stat_t
		err = unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.ENOENT {
			return writeTarget{dirfd: dirfd, base: base}, nil
		}
		if err != nil {
			unix.Close(dirfd)
			return writeTarget{}, classify("write", clean, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return writeTarget{dirfd: dirfd, base: base, old: &st}, nil
		}
		if hops >= maxSymlinkHops {
			unix.Close(dirfd)
			return writeTarget{}, classify("write", clean, unix.ELOOP)
		}
		target, err := readlinkat(dirfd, base)
		unix.Close(dirfd)
		if err != nil {
			return writeTarget{}, classify("write", clean, err)
		}
		if target == "" {
			return writeTarget{}, classify("write", clean, unix.ENOENT)
		}
		if strings.HasSuffix(target, "/") {
			return writeTarget{}, errdefs.Invalid("write %s: symlink target %q is a directory", clean, target)
		}
		dir, name := "", target
		if i := strings.LastIndexByte(target, '/'); i >= 0 {
			dir, name = target[:i], target[i+1:]
		}
		if name == "." || name == ".." {
			return writeTarget{}, errdefs.Invalid("write %s: symlink target %q is a directory", clean, target)
		}
		switch {
		case strings.HasPrefix(target, "/"):
			parent = strings.TrimLeft(dir, "/")
			if parent == "" {
				parent = "."
			}
		case dir != "":
			parent = parent + "/" + dir
		}
		base = name
	}
}

// fchmodDir sets the permission bits of directory name in dirfd through an fd
// opened without following symlinks (fchmodat would follow one).
func fchmodDir(dirfd int, name string, perm uint32) error {
	fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, beneathNoLinks)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, perm)
}

// UnixPerm converts an os.FileMode to unix permission bits (with setuid, setgid and
// sticky, given either as os.Mode* flags or as raw 07000 bits), def when mode is 0.
func UnixPerm(mode os.FileMode, def uint32) uint32 {
	if mode == 0 {
		return def
	}
	m := uint32(mode.Perm()) | uint32(mode)&0o7000
	if mode&os.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if mode&os.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if mode&os.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}
