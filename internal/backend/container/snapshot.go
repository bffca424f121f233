package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fdRW is the init's O_PATH handle on the writable-layer tmpfs (csrc/init:
// FD_RW). The tmpfs is mounted only in the sandbox's mount namespace and
// detached from every path by the pivot, so this fd is the host's one way to
// its upper directory.
const fdRW = 8

var _ driver.Snapshotter = (*instance)(nil)

// upperDir returns a host path to the sandbox's overlay upper directory.
func (in *instance) upperDir() (string, error) {
	rw := fmt.Sprintf("/proc/%d/fd/%d", in.st.PID, fdRW)
	var sf unix.Statfs_t
	if err := unix.Statfs(rw, &sf); err != nil || sf.Type != unix.TMPFS_MAGIC {
		if !in.alive() {
			return "", in.gone()
		}
		return "", errdefs.New(api.CodeConflict,
			"sandbox %s was started by an older init that does not expose its writable layer; recreate it to fork or commit", in.id)
	}
	upper := rw + "/upper"
	if fi, err := os.Lstat(upper); err != nil || !fi.IsDir() {
		return "", errdefs.Internal(fmt.Errorf("no upper directory: %v", err), "sandbox %s writable layer", in.id)
	}
	return upper, nil
}

// SnapshotRW implements driver.Snapshotter: it freezes the sandbox (unless it
// is paused already), copies the overlay upper and thaws it again.
func (in *instance) SnapshotRW(ctx context.Context, dir string, exclude []string) (driver.SnapshotStats, error) {
	var st driver.SnapshotStats
	if err := driver.CheckExclude(exclude); err != nil {
		return st, err
	}
	frozen, err := in.cg.Frozen()
	if err != nil {
		return st, errdefs.Internal(err, "read freezer state")
	}
	if !frozen {
		if err := in.cg.Freeze(ctx); err != nil {
			return st, errdefs.Internal(err, "freeze sandbox for snapshot")
		}
		defer func() {
			if err := in.cg.Thaw(context.Background()); err != nil {
				in.d.log.Warn("thaw after snapshot", "id", in.id, "err", err)
			}
		}()
	}
	upper, err := in.upperDir()
	if err != nil {
		return st, err
	}
	c := treeCopy{ctx: ctx, exclude: exclude, links: map[uint64]string{}, st: &st, idBase: in.st.IDBase, idSize: in.st.IDSize,
		holeBudget: in.diskLimit(), id: in.id}
	if err := c.copy(upper, dir, "/"); err != nil {
		_ = os.RemoveAll(dir)
		if e := (*errdefs.Error)(nil); errors.As(err, &e) {
			return st, err
		}
		return st, errdefs.Internal(err, "snapshot writable layer of %s", in.id)
	}
	if !in.alive() {
		_ = os.RemoveAll(dir)
		return st, in.gone()
	}
	// The /etc/hosts the init wrote names this sandbox: leave it out, the
	// init of a sandbox on the copy writes its own.
	hosts := filepath.Join(dir, "etc", "hosts")
	if b, err := os.ReadFile(hosts); err == nil && string(b) == initproto.HostsFile(in.id) {
		if err := os.Remove(hosts); err == nil {
			st.Entries--
			st.Excluded++
		}
	}
	return st, nil
}

// diskLimit is the size of the sandbox's writable layer (its disk limit):
// what a copy of the layer may claim beyond the data it holds.
func (in *instance) diskLimit() int64 {
	var sf unix.Statfs_t
	if err := unix.Statfs(fmt.Sprintf("/proc/%d/fd/%d", in.st.PID, fdRW), &sf); err != nil {
		return 0
	}
	return int64(sf.Blocks) * sf.Bsize
}

// treeCopy copies a directory tree as it is, by a written rule for what the
// sandbox controls:
//   - no symlink is followed: symlinks are copied as symlinks;
//   - regular files are copied sparse (holes stay holes) and the holes of all
//     files together may not exceed the writable layer's size (holeBudget):
//     a layer built from the copy, or a tar of it, writes holes out as zeros,
//     so a `truncate -s 1T` file would otherwise cost the node a terabyte;
//   - hard links stay hard links (their data is copied once);
//   - whiteouts (0/0 character devices) and FIFOs are recreated; sockets are
//     left out (nothing listens on a copy); other device nodes are left out
//     (a sandbox cannot make them: it has no CAP_MKNOD);
//   - owners, modes, times and xattrs are kept.
type treeCopy struct {
	id         string
	holeBudget int64 // 0: unbounded
	holes      int64
	ctx        context.Context
	exclude    []string
	links      map[uint64]string // inode → first destination path (hard links)
	st         *driver.SnapshotStats
	// idBase/idSize: the sandbox's user-namespace range (size 0: none). The
	// copy is stored with in-sandbox owners, as image layers are.
	idBase, idSize uint32
}

// unmap turns a host ID of the sandbox's range into its in-sandbox ID.
func (c *treeCopy) unmap(id uint32) int {
	if c.idSize > 0 && id >= c.idBase && id-c.idBase < c.idSize {
		return int(id - c.idBase)
	}
	return int(id)
}

func (c *treeCopy) copy(src, dst, rel string) error {
	if err := c.ctx.Err(); err != nil {
		return errdefs.Wrap(api.CodeDeadlineExceeded, err, "snapshot")
	}
	var s unix.Stat_t
	if err := unix.Lstat(src, &s); err != nil {
		return err
	}
	mode := s.Mode & unix.S_IFMT
	if mode == unix.S_IFSOCK || mode == unix.S_IFBLK || (mode == unix.S_IFCHR && s.Rdev != 0) {
		c.st.Excluded++ // see treeCopy's rule
		return nil
	}
	c.st.Entries++
	if mode != unix.S_IFDIR && s.Nlink > 1 {
		if first, ok := c.links[s.Ino]; ok {
			return os.Link(first, dst)
		}
		c.links[s.Ino] = dst
	}
	switch mode {
	case unix.S_IFDIR:
		if err := unix.Mkdir(dst, 0o700); err != nil {
			return err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			r := path.Join(rel, e.Name())
			if driver.MatchExclude(r, c.exclude) {
				c.st.Excluded++
				continue
			}
			if err := c.copy(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), r); err != nil {
				return err
			}
		}
	case unix.S_IFREG:
		if c.holes += fsops.Holes(&s); c.holeBudget > 0 && c.holes > c.holeBudget {
			return errdefs.New(api.CodeResourceExhausted,
				"sandbox %s: %s: sparse files claim %d bytes beyond their data, over the writable layer's size of %d bytes",
				c.id, rel, c.holes, c.holeBudget)
		}
		if err := copyFile(src, dst, s.Size); err != nil {
			return err
		}
		c.st.Bytes += s.Size
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case unix.S_IFCHR, unix.S_IFIFO:
		if mode == unix.S_IFCHR {
			c.st.Whiteouts++
		}
		if err := unix.Mknod(dst, s.Mode, int(s.Rdev)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s: unknown file type %o", rel, mode)
	}
	return c.meta(src, dst, &s, mode)
}

// meta copies xattrs (overlayfs's trusted.overlay.* among them), owner, mode
// and times.
func (c *treeCopy) meta(src, dst string, s *unix.Stat_t, mode uint32) error {
	xs, err := fsops.ListXattrs(src)
	if err != nil {
		return err
	}
	for k, v := range xs {
		names := []string{k}
		// overlayfs keeps its markers in trusted.overlay.*; in a user
		// namespace (userxattr) in user.overlay.*. The copy of such a
		// sandbox carries both, so an overlay of either kind (and commit)
		// reads it as a lower layer.
		if name, ok := strings.CutPrefix(k, "user.overlay."); ok && c.idSize > 0 {
			names = append(names, "trusted.overlay."+name)
		}
		if names[len(names)-1] == "trusted.overlay.opaque" || names[0] == "trusted.overlay.opaque" {
			if v == "y" {
				c.st.Opaque++
			}
		}
		for _, n := range names {
			if _, dup := xs[n]; dup && n != k {
				continue
			}
			if err := unix.Lsetxattr(dst, n, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", n, err)
			}
		}
	}
	if err := unix.Lchown(dst, c.unmap(s.Uid), c.unmap(s.Gid)); err != nil {
		return err
	}
	if mode != unix.S_IFLNK {
		if err := unix.Chmod(dst, s.Mode&0o7777); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{s.Atim, s.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyFile copies size bytes of the regular file src to the new file dst,
// keeping holes.
func copyFile(src, dst string, size int64) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = fsops.CopySparse(out, in, size)
	return errors.Join(err, out.Close())
}
