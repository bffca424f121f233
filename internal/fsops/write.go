package fsops

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// WriteFile creates or truncates path with mode (0 = 0644), writing at most
// maxBytes from r (0 = no limit; more → payload_too_large, file removed).
//
// The data goes to a temporary file in the same directory that is renamed over path
// once complete, so a failed or oversized write leaves any previous content intact.
// A final symlink is followed inside the root (the write lands on its target); the
// parent directory must exist (not_found otherwise). When an existing regular file
// is replaced, its owner is kept; hard links to it keep the old content.
func (f *FS) WriteFile(p string, mode os.FileMode, r io.Reader, maxBytes int64) (fi api.FileInfo, err error) {
	err = f.asRoot(func() error {
		fi, err = f.writeFile(p, mode, r, maxBytes)
		return err
	})
	return fi, err
}

func (f *FS) writeFile(p string, mode os.FileMode, r io.Reader, maxBytes int64) (api.FileInfo, error) {
	clean, err := cleanPath(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	if clean == "/" {
		return api.FileInfo{}, errdefs.Invalid("write /: is a directory")
	}
	perm := UnixPerm(mode, 0o644)
	t, err := f.resolveWriteTarget(clean)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer unix.Close(t.dirfd)
	if t.old != nil && isType(t.old, unix.S_IFDIR) {
		return api.FileInfo{}, errdefs.Invalid("write %s: is a directory", clean)
	}

	tmp, err := tempName()
	if err != nil {
		return api.FileInfo{}, errdefs.Internal(err, "write %s", clean)
	}
	fd, err := openat2(t.dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600, beneathNoLinks)
	if err != nil {
		return api.FileInfo{}, classify("write", clean, err)
	}
	file := os.NewFile(uintptr(fd), clean)
	done := false
	defer func() {
		file.Close()
		if !done {
			unix.Unlinkat(t.dirfd, tmp, 0)
		}
	}()

	src := &errReader{r: r}
	var in io.Reader = src
	if maxBytes > 0 {
		in = io.LimitReader(src, maxBytes+1)
	}
	n, err := io.Copy(file, in)
	switch {
	case src.err != nil:
		return api.FileInfo{}, inputErr("write", clean, src.err)
	case err != nil:
		return api.FileInfo{}, classify("write", clean, err)
	case maxBytes > 0 && n > maxBytes:
		return api.FileInfo{}, errdefs.New(api.CodePayloadTooLarge, "write %s: more than %d bytes", clean, maxBytes)
	}
	if t.old != nil && isType(t.old, unix.S_IFREG) {
		if err := unix.Fchown(fd, int(t.old.Uid), int(t.old.Gid)); err != nil && !isErrno(err, unix.EPERM, unix.EINVAL) {
			return api.FileInfo{}, classify("chown", clean, err)
		}
	} else if err := f.ownFD(fd); err != nil {
		return api.FileInfo{}, classify("chown", clean, err)
	}
	if err := unix.Fchmod(fd, perm); err != nil {
		return api.FileInfo{}, classify("chmod", clean, err)
	}
	if err := unix.Renameat(t.dirfd, tmp, t.dirfd, t.base); err != nil {
		return api.FileInfo{}, classify("write", clean, err)
	}
	done = true
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return api.FileInfo{}, classify("stat", clean, err)
	}
	return f.shown(fileInfo(clean, &st, "")), nil
}

// errReader remembers the error of the caller's reader, to tell it apart from
// errors writing into the sandbox.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}

// tempName returns a fresh hidden name for WriteFile's temporary file.
func tempName() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return ".dsec-write-" + hex.EncodeToString(b[:]), nil
}

// Mkdir creates a directory (with parents if asked). mode 0 means 0755; the mode is
// set exactly (no umask). Without parents, an existing entry is already_exists and a
// missing parent not_found; with parents an existing directory (or a symlink to one)
// is fine, intermediate directories get 0755, and an existing non-directory is
// already_exists.
func (f *FS) Mkdir(p string, mode os.FileMode, parents bool) error {
	return f.asRoot(func() error { return f.mkdir(p, mode, parents) })
}

func (f *FS) mkdir(p string, mode os.FileMode, parents bool) error {
	clean, err := cleanPath(p)
	if err != nil {
		return err
	}
	perm := UnixPerm(mode, 0o755)
	if parents {
		return f.mkdirAll(clean, perm)
	}
	if clean == "/" {
		return errdefs.New(api.CodeAlreadyExists, "mkdir /: exists")
	}
	dirfd, base, err := f.openParent("mkdir", clean)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	if err := unix.Mkdirat(dirfd, base, perm); err != nil {
		return classify("mkdir", clean, err)
	}
	if err := f.own(dirfd, base); err != nil {
		return classify("chown", clean, err)
	}
	return classify("chmod", clean, fchmodDir(dirfd, base, perm))
}

// mkdirAll is mkdir -p: each prefix of clean is looked up inside the root
// (following symlinks) and created in its parent's fd when missing.
func (f *FS) mkdirAll(clean string, perm uint32) error {
	if clean == "/" {
		return nil
	}
	for cur := "/"; cur != clean; {
		next := clean
		if i := indexAfter(clean, len(cur)); i >= 0 {
			next = clean[:i]
		}
		last := next == clean
		fd, err := f.openInRoot(next, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			unix.Close(fd)
			cur = next
			continue
		}
		if err != unix.ENOENT {
			if last && err == unix.ENOTDIR {
				return errdefs.Wrap(api.CodeAlreadyExists, err, "mkdir %s: exists and is not a directory", clean)
			}
			return classify("mkdir", next, err)
		}
		parent, base := splitPath(next)
		dirfd, err := f.openInRoot(parent, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return classify("mkdir", next, err)
		}
		mode := uint32(0o755)
		if last {
			mode = perm
		}
		err = unix.Mkdirat(dirfd, base, mode)
		if err == nil {
			if err = f.own(dirfd, base); err != nil {
				err = classify("chown", next, err)
			} else {
				err = classify("chmod", next, fchmodDir(dirfd, base, mode))
			}
		} else if err == unix.EEXIST {
			// Created concurrently, or a dangling symlink / non-directory: look again.
			if cfd, oerr := f.openInRoot(next, unix.O_PATH|unix.O_DIRECTORY); oerr == nil {
				unix.Close(cfd)
				err = nil
			} else {
				err = errdefs.Wrap(api.CodeAlreadyExists, err, "mkdir %s: exists and is not a directory", next)
			}
		} else {
			err = classify("mkdir", next, err)
		}
		unix.Close(dirfd)
		if err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// indexAfter returns the index of the first '/' in s after position from (skipping
// a slash right at from), or -1.
func indexAfter(s string, from int) int {
	for i := from + 1; i < len(s); i++ {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}
