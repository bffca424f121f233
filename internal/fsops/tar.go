package fsops

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// WriteTar writes path (a file or a directory tree) as an uncompressed tar to w.
//
// Entry names start with path's base name ("/work" gives "work/...", "/a/f.txt"
// gives "f.txt"; "/" gives names without a prefix and no entry for the root). path
// itself is found following symlinks inside the root; everything below it is walked
// by directory fds without following symlinks, which are archived as symlinks. Modes
// (with setuid/setgid/sticky), mtimes (whole seconds), uid and gid are kept, and the
// "user." xattrs of files and directories (PAX records, as GNU tar --xattrs); FIFOs
// and device nodes are archived as headers, sockets are skipped, hard links are not
// detected. The walk does not descend into mount points below path: they appear as
// empty directories. A file that shrinks while being read is padded with zeros, one
// that grows is cut at the size it had when opened.
func (f *FS) WriteTar(p string, w io.Writer) error {
	clean, err := cleanPath(p)
	if err != nil {
		return err
	}
	pfd, err := f.openInRoot(clean, unix.O_PATH)
	if err != nil {
		return classify("tar", clean, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(pfd, &st)
	unix.Close(pfd)
	if err != nil {
		return classify("tar", clean, err)
	}
	name := path.Base(clean)
	if clean == "/" {
		name = ""
	}
	tw := &tarWriter{tw: tar.NewWriter(w), holeBudget: f.holeBudget}
	switch {
	case isType(&st, unix.S_IFDIR):
		fd, err := f.openInRoot(clean, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return classify("tar", clean, err)
		}
		if err := tw.dir(fd, clean, name); err != nil {
			return err
		}
	case isType(&st, unix.S_IFREG):
		fd, err := f.openInRoot(clean, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
		if err != nil {
			return classify("tar", clean, err)
		}
		if err := tw.file(fd, clean, name); err != nil {
			return err
		}
	default:
		if err := tw.special(&st, clean, name); err != nil {
			return err
		}
	}
	if err := tw.tw.Close(); err != nil {
		return errdefs.Internal(err, "tar %s", clean)
	}
	return nil
}

// tarWriter archives objects reached by fds.
type tarWriter struct {
	tw         *tar.Writer
	holeBudget int64 // see FS.SetHoleBudget
	holes      int64
}

// header builds the common part of an entry's header from its stat.
func header(st *unix.Stat_t, name string) *tar.Header {
	return &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, 0),
	}
}

// writeHeader writes hdr, classifying failures (the writer is the client stream).
func (t *tarWriter) writeHeader(hdr *tar.Header, p string) error {
	if err := t.tw.WriteHeader(hdr); err != nil {
		return errdefs.Internal(err, "tar %s: writing header", p)
	}
	return nil
}

// dir archives the directory fd (which it closes) as name and its contents.
func (t *tarWriter) dir(fd int, p, name string) error {
	dir := os.NewFile(uintptr(fd), p)
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return classify("tar", p, err)
	}
	if name != "" {
		hdr := header(&st, name+"/")
		hdr.Typeflag = tar.TypeDir
		hdr.PAXRecords = paxXattrs(UserXattrsFd(fd))
		if err := t.writeHeader(hdr, p); err != nil {
			return err
		}
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return classify("tar", p, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := t.entry(fd, n, path.Join(p, n), path.Join(name, n)); err != nil {
			return err
		}
	}
	return nil
}

// entry archives entry n of dirfd (sandbox path p) as name, never following it.
// Entries that vanish or change type mid-walk are skipped.
func (t *tarWriter) entry(dirfd int, n, p, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return classify("tar", p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err := openat2(dirfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0,
			beneathNoLinks|unix.RESOLVE_NO_XDEV)
		switch {
		case err == unix.EXDEV: // mount point: archive the directory, not its contents
			hdr := header(&st, name+"/")
			hdr.Typeflag = tar.TypeDir
			return t.writeHeader(hdr, p)
		case err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR:
			return nil
		case err != nil:
			return classify("tar", p, err)
		}
		return t.dir(fd, p, name)
	case unix.S_IFREG:
		fd, err := openat2(dirfd, n, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0, beneathNoLinks)
		switch {
		case err == unix.ENOENT || err == unix.ELOOP:
			return nil
		case err != nil:
			return classify("tar", p, err)
		}
		return t.file(fd, p, name)
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, n)
		if err != nil {
			if err == unix.ENOENT || err == unix.EINVAL {
				return nil
			}
			return classify("tar", p, err)
		}
		hdr := header(&st, name)
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
		return t.writeHeader(hdr, p)
	default:
		return t.special(&st, p, name)
	}
}

// file archives the open file fd (which it closes) as name; a non-regular file
// (swapped in mid-walk) is skipped.
func (t *tarWriter) file(fd int, p, name string) error {
	file := os.NewFile(uintptr(fd), p)
	defer file.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return classify("tar", p, err)
	}
	if !isType(&st, unix.S_IFREG) {
		return nil
	}
	if t.holes += Holes(&st); t.holeBudget > 0 && t.holes > t.holeBudget {
		return errdefs.New(api.CodeResourceExhausted,
			"tar %s: sparse files claim %d bytes beyond their data, over the sandbox's disk limit of %d bytes", p, t.holes, t.holeBudget)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return classify("tar", p, err)
	}
	hdr := header(&st, name)
	hdr.Typeflag = tar.TypeReg
	hdr.Size = st.Size
	hdr.PAXRecords = paxXattrs(UserXattrsFd(fd))
	if err := t.writeHeader(hdr, p); err != nil {
		return err
	}
	n, err := io.CopyN(t.tw, file, st.Size)
	if errors.Is(err, io.EOF) {
		// Shrunk while reading: pad to the announced size.
		_, err = io.CopyN(t.tw, zeroReader{}, st.Size-n)
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return classify("tar", p, err)
		}
		return errdefs.Internal(err, "tar %s", p)
	}
	return nil
}

// special archives a FIFO or device node as a header; sockets are skipped.
func (t *tarWriter) special(st *unix.Stat_t, p, name string) error {
	hdr := header(st, name)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
	case unix.S_IFCHR:
		hdr.Typeflag = tar.TypeChar
	case unix.S_IFBLK:
		hdr.Typeflag = tar.TypeBlock
	default:
		return nil
	}
	if hdr.Typeflag != tar.TypeFifo {
		rdev := uint64(st.Rdev) //nolint:unconvert // Rdev is uint32 on some arches
		hdr.Devmajor = int64(unix.Major(rdev))
		hdr.Devminor = int64(unix.Minor(rdev))
	}
	return t.writeHeader(hdr, p)
}

// zeroReader reads zeros forever.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
