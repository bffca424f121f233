package layer

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	erofs "github.com/erofs/go-erofs"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/internal/image"
)

func asErr(err error, target **errdefs.Error) bool { return errors.As(err, target) }
func ctxDone(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// builder adds entries to a go-erofs Writer.
type builder struct {
	ctx      context.Context
	out      *os.File
	w        *erofs.Writer
	opts     Options
	entries  int
	read     int64
	lastProg time.Time
	buf      []byte
	config   *image.Config // an OCI source's image config
	// overlay: tar whiteouts become overlayfs whiteouts (BuildOCILayer).
	overlay bool
	opaque  map[string]bool // directories with an opaque marker
	links   links           // hard links (links.go)
}

func newBuilder(ctx context.Context, out *os.File, opts Options) *builder {
	copts := []erofs.CreateOpt{erofs.WithBuildTime(0, 0)} // reproducible: same tree → same digest
	if opts.TempDir != "" {
		copts = append(copts, erofs.WithTempDir(opts.TempDir))
	}
	return &builder{ctx: ctx, out: out, w: erofs.Create(out, copts...), opts: opts, buf: make([]byte, 1<<20)}
}

func (b *builder) close() error {
	if b.opts.Progress != nil {
		b.opts.Progress(b.read)
	}
	if err := b.setLinkCounts(); err != nil {
		return err
	}
	if err := b.w.Close(); err != nil {
		return err
	}
	if err := b.relink(b.out); err != nil {
		return errdefs.Internal(err, "layer build: hard links")
	}
	return nil
}

// meta is what every entry carries besides its content.
type meta struct {
	mode   fs.FileMode // Go mode bits incl. type, setuid, setgid, sticky
	uid    int
	gid    int
	mtime  time.Time
	xattrs map[string]string
}

func (b *builder) setMeta(name string, m meta) error {
	if err := b.w.Chown(name, m.uid, m.gid); err != nil {
		return err
	}
	if m.mode&fs.ModeSymlink == 0 {
		if err := b.w.Chmod(name, m.mode); err != nil {
			return err
		}
	}
	if !m.mtime.IsZero() {
		if err := b.w.Chtimes(name, m.mtime, m.mtime); err != nil {
			return err
		}
	}
	for k, v := range m.xattrs {
		if err := b.w.Setxattr(name, k, v); err != nil {
			return fmt.Errorf("xattr %s on %s: %w", k, name, err)
		}
	}
	return nil
}

func (b *builder) tick() error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	b.entries++
	if b.opts.Progress != nil && time.Since(b.lastProg) > 200*time.Millisecond {
		b.lastProg = time.Now()
		b.opts.Progress(b.read)
	}
	return nil
}

func (b *builder) mkdir(name string, m meta) error {
	if name != "/" {
		if fi, err := b.w.Stat(name); err != nil || !fi.IsDir() {
			if err := b.w.Mkdir(name, m.mode.Perm()); err != nil {
				return err
			}
		}
	}
	return b.setMeta(name, m)
}

func (b *builder) file(name string, r io.Reader, m meta) error {
	f, err := b.w.Create(name)
	if err != nil {
		return err
	}
	for {
		if err := b.ctx.Err(); err != nil {
			f.Close()
			return err
		}
		n, rerr := r.Read(b.buf)
		if n > 0 {
			if _, err := f.Write(b.buf[:n]); err != nil {
				f.Close()
				return err
			}
			b.read += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			f.Close()
			return rerr
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := b.w.SetNlink(name, 1); err != nil {
		return err
	}
	return b.setMeta(name, m)
}

// hardlink adds name as another name of the inode of the already-added
// regular file target: a placeholder now (an empty file, so the content is stored
// once), made a directory entry of target's inode when the image is written
// (links.go). m, if set, is the link entry's metadata, which a tar extraction
// applies to the shared inode (nil: the target's stays).
func (b *builder) hardlink(name, target string, m *meta) error {
	if name == target {
		return nil // a link to itself: the file as it is
	}
	fi, err := b.w.Stat(target)
	if err != nil {
		return fmt.Errorf("hard link %s → %s: %w", name, target, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("hard link %s → %s: target is not a regular file", name, target)
	}
	g := b.links.group(target)
	f, err := b.w.Create(name)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b.links.add(g, name)
	if m == nil {
		return nil
	}
	return b.setMeta(g.primary, *m)
}

func (b *builder) symlink(name, target string, m meta) error {
	if err := b.w.Symlink(target, name); err != nil {
		return err
	}
	return b.setMeta(name, m)
}

func (b *builder) node(name string, typ uint32, rdev uint64, m meta) error {
	if err := b.w.Mknod(name, uint16(typ|fsops.UnixPerm(m.mode, 0)), uint32(rdev)); err != nil {
		return err
	}
	return b.setMeta(name, m)
}

// ---- directories ------------------------------------------------------------

func (b *builder) addDir(root string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errdefs.Invalid("layer source dir:%s is not a directory", root)
	}
	type key struct{ dev, ino uint64 }
	seen := map[key]string{} // hard links: first name of each multiply-linked inode
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := b.tick(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		name := "/" + filepath.ToSlash(rel)
		if rel == "." {
			name = "/"
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		m := meta{mode: goMode(st.Mode), uid: int(st.Uid), gid: int(st.Gid), mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec)}
		m.xattrs, err = fsops.ListXattrs(p)
		if err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return b.mkdir(name, m)
		case unix.S_IFREG:
			if st.Nlink > 1 {
				k := key{st.Dev, st.Ino}
				if first, ok := seen[k]; ok {
					return b.hardlink(name, first, &m)
				}
				seen[k] = name
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return b.file(name, bufio.NewReaderSize(f, 1<<20), m)
		case unix.S_IFLNK:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return b.symlink(name, t, m)
		case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO, unix.S_IFSOCK:
			return b.node(name, st.Mode&unix.S_IFMT, st.Rdev, m)
		}
		return fmt.Errorf("%s: unsupported file type %o", p, st.Mode&unix.S_IFMT)
	})
}

func goMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// ---- tar streams --------------------------------------------------------------

func (b *builder) addTarFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := maybeGunzip(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return err
	}
	return b.addTar(r)
}

func maybeGunzip(br *bufio.Reader) (io.Reader, error) {
	magic, _ := br.Peek(2)
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		return gzip.NewReader(br)
	}
	return br, nil
}

// addTar adds a (flattened) tar stream. Whiteout files are kept as they are: a plain
// tar is not an overlay layer (OCI images are flattened before they get here).
func (b *builder) addTar(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		if err := b.tick(); err != nil {
			return err
		}
		name := cleanName(h.Name)
		if name == "" {
			continue
		}
		if b.overlay {
			if done, err := b.whiteout(name, h); done || err != nil {
				if err != nil {
					return fmt.Errorf("tar: %s: %w", h.Name, err)
				}
				continue
			}
		}
		m := meta{mode: h.FileInfo().Mode(), uid: h.Uid, gid: h.Gid, mtime: h.ModTime}
		for k, v := range h.PAXRecords {
			if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if m.xattrs == nil {
					m.xattrs = map[string]string{}
				}
				m.xattrs[x] = v
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = b.mkdir(name, m)
			if err == nil && b.overlay {
				err = b.keepOpaque(name)
			}
		case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
			err = b.file(name, tr, m)
		case tar.TypeLink:
			target := cleanName(h.Linkname)
			if target == "" || target == "/" {
				return fmt.Errorf("tar: hard link %s has bad target %q", h.Name, h.Linkname)
			}
			m.mode &^= fs.ModeType // a regular file
			if h.Mode == 0 {
				err = b.hardlink(name, target, nil) // metadata of the target
			} else {
				err = b.hardlink(name, target, &m)
			}
		case tar.TypeSymlink:
			err = b.symlink(name, h.Linkname, m)
		case tar.TypeChar:
			err = b.node(name, unix.S_IFCHR, unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)), m)
		case tar.TypeBlock:
			err = b.node(name, unix.S_IFBLK, unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)), m)
		case tar.TypeFifo:
			err = b.node(name, unix.S_IFIFO, 0, m)
		case tar.TypeXGlobalHeader:
			continue
		default:
			return fmt.Errorf("tar: %s: unsupported entry type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			return fmt.Errorf("tar: %s: %w", h.Name, err)
		}
	}
}

// cleanName makes a tar member name absolute and clean; "" for entries outside the
// root (never written).
func cleanName(n string) string {
	c := path.Clean("/" + n)
	if strings.Contains(c, "\x00") {
		return ""
	}
	return c
}

// Names of the OCI whiteout files (the image spec's "Whiteouts").
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	opaqueXattr    = "trusted.overlay.opaque"
)

// whiteout turns an OCI whiteout entry into its overlayfs form; done reports
// that name was one.
func (b *builder) whiteout(name string, h *tar.Header) (done bool, err error) {
	dir, base := path.Split(name)
	if !strings.HasPrefix(base, whiteoutPrefix) {
		return false, nil
	}
	dir = path.Clean(dir)
	if base == whiteoutOpaque {
		if b.opaque == nil {
			b.opaque = map[string]bool{}
		}
		b.opaque[dir] = true
		if fi, err := b.w.Stat(dir); err != nil || !fi.IsDir() {
			// No entry for the directory yet: made here, its own entry (if
			// any) later sets its metadata.
			if err := b.w.Mkdir(dir, 0o755); err != nil {
				return true, err
			}
		}
		return true, b.w.Setxattr(dir, opaqueXattr, "y")
	}
	target := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
	if target == dir || strings.HasPrefix(path.Base(target), whiteoutPrefix) {
		return true, fmt.Errorf("malformed whiteout %q", h.Name)
	}
	return true, b.node(target, unix.S_IFCHR, 0, meta{mode: fs.ModeDevice | fs.ModeCharDevice, mtime: h.ModTime})
}

// keepOpaque sets the opaque xattr again on a directory whose entry came after
// its opaque marker (setMeta leaves other xattrs as they are, but a tar
// directory entry may carry its own set).
func (b *builder) keepOpaque(dir string) error {
	if !b.opaque[dir] {
		return nil
	}
	return b.w.Setxattr(dir, opaqueXattr, "y")
}
