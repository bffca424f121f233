package fsops

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// ExtractTar extracts a tar (plain or gzip, detected) into directory path.
//
// path is created with parents if missing (mode 0755) and found following symlinks
// inside the root; it is then opened once and every entry is resolved below that fd
// with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so no entry can leave it, not even
// through a symlink placed by an earlier entry or by a process in the sandbox.
// Entry names are cleaned: a leading "/" is dropped, and a name whose ".." climbs
// above path, or that needs to traverse a symlink, is an invalid_argument error that
// stops the extraction (entries before it stay extracted). Missing parent
// directories are created (0755).
//
// Directories, regular files, symlinks (any target text: it is only ever resolved
// inside the root) and hard links (whose target must be an earlier entry below path)
// are created with their mode, uid/gid (best effort) and mtime; files and
// directories also get the "user." extended attributes of the entry's PAX
// records (SCHILY.xattr.user.*; skipped where the file system has none); an existing
// non-directory in the way is replaced, an existing directory is kept and gets the
// entry's metadata. Device nodes, FIFOs and other types are skipped, as is an entry
// naming path itself ("./"), whose metadata is not applied.
func (f *FS) ExtractTar(p string, r io.Reader) error {
	return f.asRoot(func() error { return f.extractTar(p, r) })
}

func (f *FS) extractTar(p string, r io.Reader) error {
	clean, err := cleanPath(p)
	if err != nil {
		return err
	}
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return inputErr("extract into", clean, err)
		}
		defer gz.Close()
		src = gz
	}
	if err := f.mkdirAll(clean, 0o755); err != nil {
		return err
	}
	fd, err := f.openInRoot(clean, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return classify("extract into", clean, err)
	}
	x := &extractor{fs: f, dest: fd, display: clean}
	defer unix.Close(fd)

	tr := tar.NewReader(src)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return x.readErr(err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
	x.finish()
	return nil
}

// extractor extracts entries below the directory fd dest.
type extractor struct {
	fs      *FS
	dest    int
	display string // dest's sandbox path, for messages
	dirs    []dirTime
}

// dirTime is a directory mtime applied once all entries are in.
type dirTime struct {
	name  string
	mtime time.Time
}

// readErr classifies an error reading the archive: corrupt data is the caller's
// (invalid_argument), an oversized body payload_too_large (see inputErr).
func (x *extractor) readErr(err error) error {
	var en unix.Errno
	if errors.As(err, &en) {
		return classify("extract into", x.display, err)
	}
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return errdefs.Wrap(api.CodeInvalidArgument, err, "extract into %s: bad tar stream", x.display)
	}
	return inputErr("extract into", x.display, err)
}

// show returns the sandbox path of relative entry name rel.
func (x *extractor) show(rel string) string { return path.Join(x.display, rel) }

// entry extracts one entry.
func (x *extractor) entry(hdr *tar.Header, tr io.Reader) error {
	name, err := cleanEntryName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "" {
		return nil
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeGNUSparse, tar.TypeSymlink, tar.TypeLink:
	default:
		return nil // devices, FIFOs, unknown types: skipped
	}
	parent, base := splitRel(name)
	pfd, err := x.openParent(parent, name)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	shown := x.show(name)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(pfd, base, name, hdr)
	case tar.TypeSymlink:
		if err := x.clear(pfd, base, shown); err != nil {
			return err
		}
		if strings.IndexByte(hdr.Linkname, 0) >= 0 || hdr.Linkname == "" {
			return errdefs.Invalid("extract %s: bad symlink target %q", shown, hdr.Linkname)
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return classify("extract", shown, err)
		}
		return x.meta(pfd, base, -1, shown, hdr)
	case tar.TypeLink:
		return x.link(pfd, base, name, hdr)
	default:
		return x.file(pfd, base, shown, hdr, tr)
	}
}

// openParent opens relative directory rel below dest without traversing symlinks,
// creating missing directories (0755). name is the entry, for messages.
func (x *extractor) openParent(rel, name string) (int, error) {
	if rel == "" {
		rel = "."
	}
	fd, err := openat2(x.dest, rel, unix.O_PATH|unix.O_DIRECTORY, 0, beneathNoLinks)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOENT {
		return -1, x.parentErr(name, err)
	}
	cur, err := openat2(x.dest, ".", unix.O_PATH|unix.O_DIRECTORY, 0, beneathNoLinks)
	if err != nil {
		return -1, classify("extract into", x.display, err)
	}
	for c := range strings.SplitSeq(rel, "/") {
		err := unix.Mkdirat(cur, c, 0o755)
		if err == nil {
			err = x.fs.own(cur, c)
		}
		if err != nil && err != unix.EEXIST {
			unix.Close(cur)
			return -1, x.parentErr(name, err)
		}
		next, err := openat2(cur, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, beneathNoLinks)
		unix.Close(cur)
		if err != nil {
			return -1, x.parentErr(name, err)
		}
		cur = next
	}
	return cur, nil
}

// parentErr classifies a failure to reach an entry's parent directory.
func (x *extractor) parentErr(name string, err error) error {
	switch err {
	case unix.ELOOP, unix.EXDEV:
		return errdefs.Wrap(api.CodeInvalidArgument, err, "extract %s: path traverses a symlink or mount point", x.show(name))
	case unix.ENOTDIR:
		return errdefs.Wrap(api.CodeInvalidArgument, err, "extract %s: a parent is not a directory", x.show(name))
	}
	return classify("extract", x.show(name), err)
}

// clear removes a non-directory (or empty directory) in the way of a new entry.
func (x *extractor) clear(pfd int, base, shown string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return classify("extract", shown, err)
	}
	flags := 0
	if isType(&st, unix.S_IFDIR) {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(pfd, base, flags); err != nil && err != unix.ENOENT {
		if err == unix.ENOTEMPTY || err == unix.EEXIST {
			return errdefs.Wrap(api.CodeConflict, err, "extract %s: a non-empty directory is in the way", shown)
		}
		return classify("extract", shown, err)
	}
	return nil
}

// mkdir creates (or keeps) a directory entry and applies its owner and mode; its
// mtime is applied at the end, after its contents were written.
func (x *extractor) mkdir(pfd int, base, name string, hdr *tar.Header) error {
	shown := x.show(name)
	err := unix.Mkdirat(pfd, base, 0o700)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if serr := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil && !isType(&st, unix.S_IFDIR) {
			if err := x.clear(pfd, base, shown); err != nil {
				return err
			}
			err = unix.Mkdirat(pfd, base, 0o700)
		} else {
			err = nil
		}
	}
	if err != nil {
		return classify("extract", shown, err)
	}
	fd, err := openat2(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, beneathNoLinks)
	if err != nil {
		return classify("extract", shown, err)
	}
	defer unix.Close(fd)
	if err := x.chown(fd, hdr); err != nil {
		return classify("chown", shown, err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return classify("chmod", shown, err)
	}
	if err := setUserXattrs(fd, hdr); err != nil {
		return classify("setxattr", shown, err)
	}
	x.dirs = append(x.dirs, dirTime{name: name, mtime: hdr.ModTime})
	return nil
}

// file writes a regular file entry (created fresh, O_EXCL, never through a symlink).
func (x *extractor) file(pfd int, base, shown string, hdr *tar.Header, tr io.Reader) error {
	if err := x.clear(pfd, base, shown); err != nil {
		return err
	}
	fd, err := openat2(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600, beneathNoLinks)
	if err != nil {
		return classify("extract", shown, err)
	}
	file := os.NewFile(uintptr(fd), shown)
	defer file.Close()
	if _, err := io.Copy(file, tr); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return classify("extract", shown, err)
		}
		return x.readErr(err)
	}
	if err := x.chown(fd, hdr); err != nil {
		return classify("chown", shown, err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return classify("chmod", shown, err)
	}
	if err := setUserXattrs(fd, hdr); err != nil {
		return classify("setxattr", shown, err)
	}
	return x.meta(pfd, base, fd, shown, hdr)
}

// link creates a hard link entry; its target must be an existing entry below dest,
// reached without symlinks.
func (x *extractor) link(pfd int, base, name string, hdr *tar.Header) error {
	shown := x.show(name)
	target, err := cleanEntryName(hdr.Linkname)
	if err != nil {
		return err
	}
	if target == "" {
		return errdefs.Invalid("extract %s: hard link to the extraction directory", shown)
	}
	if target == name {
		return nil
	}
	tparent, tbase := splitRel(target)
	if tparent == "" {
		tparent = "."
	}
	tfd, err := openat2(x.dest, tparent, unix.O_PATH|unix.O_DIRECTORY, 0, beneathNoLinks)
	if err != nil {
		return x.parentErr(target, err)
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return classify("extract", x.show(target), err)
	}
	if isType(&st, unix.S_IFDIR) {
		return errdefs.Invalid("extract %s: hard link to a directory", shown)
	}
	if err := x.clear(pfd, base, shown); err != nil {
		return err
	}
	// flags 0: a symlink target is linked itself, not followed.
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return classify("extract", shown, err)
	}
	return nil
}

// meta applies owner (symlinks: by name, not followed) and mtime of an entry.
// fd is the open file, or -1.
func (x *extractor) meta(pfd int, base string, fd int, shown string, hdr *tar.Header) error {
	if fd < 0 {
		if uid, gid, ok := x.ids(hdr); ok {
			if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !isErrno(err, unix.EPERM, unix.EINVAL) {
				return classify("chown", shown, err)
			}
		}
	}
	setMtime(pfd, base, hdr.ModTime)
	return nil
}

// finish applies directory mtimes, deepest last-created first; failures (e.g. a
// directory replaced by a later entry) are ignored.
func (x *extractor) finish() {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		parent, base := splitRel(d.name)
		if parent == "" {
			parent = "."
		}
		pfd, err := openat2(x.dest, parent, unix.O_PATH|unix.O_DIRECTORY, 0, beneathNoLinks)
		if err != nil {
			continue
		}
		setMtime(pfd, base, d.mtime)
		unix.Close(pfd)
	}
}

// setMtime sets the mtime of entry base of pfd without following it (best effort:
// out-of-range times are ignored).
func setMtime(pfd int, base string, mtime time.Time) {
	if mtime.IsZero() {
		return
	}
	ts := []unix.Timespec{
		{Nsec: unix.UTIME_OMIT},
		{Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())},
	}
	_ = unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// ids returns the host uid and gid for the entry's owner when they are
// valid ids. In a user namespace an owner outside the sandbox's range
// becomes the sandbox's root, so nothing is left owned by host root.
func (x *extractor) ids(hdr *tar.Header) (int, int, bool) {
	const maxID = 1<<32 - 2
	if hdr.Uid < 0 || hdr.Gid < 0 || int64(hdr.Uid) > maxID || int64(hdr.Gid) > maxID {
		if x.fs.ids.Size == 0 {
			return 0, 0, false
		}
		return int(x.fs.ids.HostID), int(x.fs.ids.HostID), true
	}
	uid, uok := x.fs.hostID(hdr.Uid)
	gid, gok := x.fs.hostID(hdr.Gid)
	if !uok || !gok {
		return int(x.fs.ids.HostID), int(x.fs.ids.HostID), true
	}
	return uid, gid, true
}

// chown gives the open fd the entry's owner; ids the kernel cannot map (EINVAL, e.g.
// in a user namespace) or may not set (EPERM) are left as they are.
func (x *extractor) chown(fd int, hdr *tar.Header) error {
	uid, gid, ok := x.ids(hdr)
	if !ok {
		return nil
	}
	if err := unix.Fchown(fd, uid, gid); err != nil && !isErrno(err, unix.EPERM, unix.EINVAL) {
		return err
	}
	return nil
}
