package fsops

import (
	"archive/tar"
	"errors"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The "user." extended attributes of files and directories are part of what
// Stat and List report (api.FileInfo.Xattrs) and what ExtractTar applies from
// a tar entry's PAX records (as GNU tar --xattrs writes them).

const (
	userXattrPrefix = "user."
	paxXattrPrefix  = "SCHILY.xattr."
)

// userXattrsAt returns the "user." attributes of entry name of dirfd, whose
// lstat is st: nil for other types than regular files and directories, when
// it has none, or when they cannot be read (the entry raced away, or the file
// system has none). The entry is opened O_PATH and never followed.
func userXattrsAt(dirfd int, name string, st *unix.Stat_t) map[string]string {
	if !isType(st, unix.S_IFREG) && !isType(st, unix.S_IFDIR) {
		return nil
	}
	fd, err := openat2(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0, beneathNoLinks)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if unix.Fstat(fd, &now) != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		return nil // replaced since st was read
	}
	// An O_PATH fd does not serve f*xattr; its /proc/self/fd link (followed)
	// names exactly the object it holds.
	p := "/proc/self/fd/" + strconv.Itoa(fd)
	buf := make([]byte, 1024)
	n, err := unix.Listxattr(p, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Listxattr(p, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Listxattr(p, buf)
		}
	}
	if err != nil || n == 0 {
		return nil
	}
	var out map[string]string
	for k := range strings.SplitSeq(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(k, userXattrPrefix) {
			continue
		}
		v, ok := getXattr(p, k)
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

// getXattr reads attribute k of path p (following it).
func getXattr(p, k string) (string, bool) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Getxattr(p, k, buf)
		if errors.Is(err, unix.ERANGE) {
			if n, err = unix.Getxattr(p, k, nil); err != nil {
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
