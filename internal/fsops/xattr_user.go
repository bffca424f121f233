package fsops

import (
	"archive/tar"
	"errors"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The "user." extended attributes of files and directories are part of what
// Stat and List report (api.FileInfo.Xattrs) and what ExtractTar applies from
// a tar entry's PAX records (as GNU tar --xattrs writes them).

const (
	userXattrPrefix = "user."
	paxXattrPrefix  = "SCHILY.xattr."
)

// userXattrsAt returns the "user." attributes of entry name (one path
// component) of dirfd, whose lstat is st: nil for other types than regular
// files and directories, when it has none, or when they cannot be read (the
// entry raced away, or the file system has none). The entry is reached through
// dirfd's /proc/self/fd link and never followed (a symlink or device swapped
// in meanwhile has no user attributes), and nothing is opened: a file without
// attributes costs one llistxattr.
func userXattrsAt(dirfd int, name string, st *unix.Stat_t) map[string]string {
	if (!isType(st, unix.S_IFREG) && !isType(st, unix.S_IFDIR)) || strings.ContainsRune(name, '/') {
		return nil
	}
	p := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
	buf := make([]byte, 256)
	n, err := listxattrAt(dirfd, name, buf)
	if errors.Is(err, unix.ENOSYS) {
		n, err = unix.Llistxattr(p, buf)
	}
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(p, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(p, buf)
		}
	}
	if err != nil {
		return nil
	}
	return userXattrs(buf[:n], func(k string) (string, bool) { return getXattr(p, k) })
}

// userXattrs reads the "user." attributes among list (listxattr's
// NUL-separated names) with get (nil: none).
func userXattrs(list []byte, get func(k string) (string, bool)) map[string]string {
	var out map[string]string
	for k := range strings.SplitSeq(string(list), "\x00") {
		if !strings.HasPrefix(k, userXattrPrefix) {
			continue
		}
		v, ok := get(k)
		if !ok {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// listxattrAt is listxattrat(2) (Linux 6.13) on entry name of dirfd, not
// followed: the common case, a file without attributes, without the path walk
// through /proc. ENOSYS on older kernels.
func listxattrAt(dirfd int, name string, buf []byte) (int, error) {
	pname, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	n, _, errno := unix.Syscall6(unix.SYS_LISTXATTRAT, uintptr(dirfd), uintptr(unsafe.Pointer(pname)),
		uintptr(unix.AT_SYMLINK_NOFOLLOW), uintptr(p), uintptr(len(buf)), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// getXattr reads attribute k of path p (not following it).
func getXattr(p, k string) (string, bool) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(p, k, buf)
		if errors.Is(err, unix.ERANGE) {
			if n, err = unix.Lgetxattr(p, k, nil); err != nil {
				return "", false
			}
			buf = make([]byte, n)
			continue
		}
		if err != nil {
			return "", false
		}
		return string(buf[:n]), true
	}
}

// UserXattrsFd returns the "user." attributes of the open file fd (nil: none,
// or a file system without them).
func UserXattrsFd(fd int) map[string]string {
	buf := make([]byte, 256)
	n, err := unix.Flistxattr(fd, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Flistxattr(fd, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Flistxattr(fd, buf)
		}
	}
	if err != nil {
		return nil
	}
	return userXattrs(buf[:n], func(k string) (string, bool) {
		sz, err := unix.Fgetxattr(fd, k, nil)
		if err != nil {
			return "", false
		}
		v := make([]byte, sz)
		if sz, err = unix.Fgetxattr(fd, k, v); err != nil {
			return "", false
		}
		return string(v[:sz]), true
	})
}

// paxXattrs returns attrs as a tar entry's PAX records (nil: none).
func paxXattrs(attrs map[string]string) map[string]string {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]string, len(attrs))
	for k, v := range attrs {
		out[paxXattrPrefix+k] = v
	}
	return out
}

// setUserXattrs sets on the open file fd the "user." attributes hdr's PAX
// records carry. A file system without user attributes is no error (the
// attributes are skipped, as uid/gid are where they cannot be set).
func setUserXattrs(fd int, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattrPrefix)
		if !ok || !strings.HasPrefix(name, userXattrPrefix) {
			continue
		}
		err := unix.Fsetxattr(fd, name, []byte(v), 0)
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}
