package layer_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/layer"
)

// linkTar writes a layer tar whose hard links the tests check: bin/tool (1 MiB,
// setuid, xattrs) has 3 names, one in a deeper directory and one in the root;
// usr/lib/deep/lib.so is linked from the root directory and from a directory
// with xattrs.
func linkTar(t *testing.T, big []byte, links bool) string {
	now := time.Unix(1700000000, 0)
	hs := []tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "bin/tool", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 7, Gid: 8, ModTime: now, Format: tar.FormatPAX,
			PAXRecords: map[string]string{"SCHILY.xattr.user.dsec": "x1", "SCHILY.xattr.trusted.dsec": "t1"}},
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "usr/lib/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "usr/lib/deep/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "usr/lib/deep/lib.so", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
		// A directory with xattrs: its entries follow them in its inode.
		{Name: "xdir/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now, Format: tar.FormatPAX,
			PAXRecords: map[string]string{"SCHILY.xattr.user.dir": "d"}},
	}
	data := map[string]string{"bin/tool": string(big), "usr/lib/deep/lib.so": "LIB"}
	if links {
		hs = append(hs,
			// As Docker writes it: the link entry carries the inode's metadata.
			tar.Header{Name: "usr/lib/deep/tool-link", Typeflag: tar.TypeLink, Linkname: "bin/tool", Mode: 0o4755, Uid: 7, Gid: 8, ModTime: now},
			// Mode 0: the target's metadata.
			tar.Header{Name: "tool3", Typeflag: tar.TypeLink, Linkname: "usr/lib/deep/tool-link", ModTime: now},
			tar.Header{Name: "lib.so", Typeflag: tar.TypeLink, Linkname: "usr/lib/deep/lib.so", Mode: 0o644, ModTime: now},
			tar.Header{Name: "xdir/lib.so", Typeflag: tar.TypeLink, Linkname: "lib.so", Mode: 0o644, ModTime: now},
		)
	}
	p := filepath.Join(t.TempDir(), "links.tar")
	f, err := os.Create(p)
	must(t, err)
	tw := tar.NewWriter(f)
	for _, h := range hs {
		c, ok := data[h.Name]
		if ok {
			h.Size = int64(len(c))
		}
		must(t, tw.WriteHeader(&h))
		if ok {
			_, err := tw.Write([]byte(c))
			must(t, err)
		}
	}
	must(t, tw.Close())
	must(t, f.Close())
	return p
}

type inode struct {
	ino, nlink uint64
	mode, uid  uint32
	content    string
	xattr      string
}

func (i inode) String() string {
	return fmt.Sprintf("inode %d nlink %d mode %o uid %d xattr %q, %d bytes", i.ino, i.nlink, i.mode, i.uid, i.xattr, len(i.content))
}

func lstatInode(t *testing.T, mnt, name string) inode {
	t.Helper()
	p := filepath.Join(mnt, name)
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	b, err := os.ReadFile(p)
	must(t, err)
	v := make([]byte, 64)
	n, _ := unix.Lgetxattr(p, "user.dsec", v)
	return inode{ino: st.Ino, nlink: uint64(st.Nlink), mode: st.Mode, uid: st.Uid, content: string(b), xattr: string(v[:max(n, 0)])}
}

// TestHardLinksShareOneInode builds layers from a tar with hard links (a plain
// tar build and an OCI layer build, which keeps overlayfs whiteouts) and from
// a directory, mounts each with the kernel's EROFS and checks that every name
// of an inode has its inode number, link count, metadata and content, and
// that a hard-linked file's content is stored once.
func TestHardLinksShareOneInode(t *testing.T) {
	ctx := context.Background()
	big := make([]byte, 1<<20)
	rand.Read(big)
	withLinks, without := linkTar(t, big, true), linkTar(t, big, false)
	store := newStore(t)
	build := func(p string, oci bool) layer.Result {
		t.Helper()
		if oci {
			f, err := os.Open(p)
			must(t, err)
			defer f.Close()
			l, err := layer.BuildOCILayer(ctx, "links", f, store, layer.Options{})
			must(t, err)
			return l
		}
		l, err := layer.Build(ctx, layer.Source{Kind: "tar", Arg: p}, store, layer.Options{})
		must(t, err)
		return l
	}
	for _, oci := range []bool{false, true} {
		l, base := build(withLinks, oci), build(without, oci)
		// 4 more names: a few directory entries and inodes, never a
		// second copy of the 1 MiB.
		if grow := l.Size - base.Size; grow > 16<<10 {
			t.Errorf("oci=%v: the layer with hard links is %d bytes larger than without them (content stored again?)", oci, grow)
		}
		if l.ContentSize != base.ContentSize {
			t.Errorf("oci=%v: %d content bytes read, want %d", oci, l.ContentSize, base.ContentSize)
		}
		mnt := mountLayer(t, store, l.Digest)
		tool := lstatInode(t, mnt, "bin/tool")
		if tool.nlink != 3 || tool.mode != unix.S_IFREG|0o4755 || tool.uid != 7 || tool.content != string(big) || tool.xattr != "x1" {
			t.Errorf("oci=%v: bin/tool: %v", oci, tool)
		}
		for _, n := range []string{"usr/lib/deep/tool-link", "tool3"} {
			if got := lstatInode(t, mnt, n); got != tool {
				t.Errorf("oci=%v: %s: %v, want bin/tool's %v", oci, n, got, tool)
			}
		}
		lib, lib2, lib3 := lstatInode(t, mnt, "usr/lib/deep/lib.so"), lstatInode(t, mnt, "lib.so"), lstatInode(t, mnt, "xdir/lib.so")
		if lib != lib2 || lib != lib3 || lib.nlink != 3 || lib.content != "LIB" {
			t.Errorf("oci=%v: lib.so %v, xdir/lib.so %v, usr/lib/deep/lib.so %v", oci, lib2, lib3, lib)
		}
		fsck(t, store, l.Digest)
	}

	// A directory tree: names of one inode within it stay one inode.
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "a/b"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "f"), big, 0o644))
	must(t, os.Link(filepath.Join(src, "f"), filepath.Join(src, "a/b/f2")))
	must(t, os.Link(filepath.Join(src, "f"), filepath.Join(src, "a/f3")))
	l, err := layer.Build(ctx, layer.Source{Kind: "dir", Arg: src}, store, layer.Options{})
	must(t, err)
	if l.Size > 1<<20+64<<10 {
		t.Errorf("dir layer of a 1 MiB file with 3 names: %d bytes", l.Size)
	}
	mnt := mountLayer(t, store, l.Digest)
	f := lstatInode(t, mnt, "f")
	if f.nlink != 3 || lstatInode(t, mnt, "a/b/f2") != f || lstatInode(t, mnt, "a/f3") != f {
		t.Errorf("dir source: names of one inode differ: %v / %v / %v", f, lstatInode(t, mnt, "a/b/f2"), lstatInode(t, mnt, "a/f3"))
	}
	fsck(t, store, l.Digest)
}

// fsck checks a stored layer with erofs-utils' fsck.erofs, which reads every
// inode and file.
func fsck(t *testing.T, store blob.Store, dg string) {
	t.Helper()
	rc, err := store.Open(context.Background(), dg)
	must(t, err)
	var b bytes.Buffer
	_, err = b.ReadFrom(rc)
	rc.Close()
	must(t, err)
	p := filepath.Join(t.TempDir(), "l.erofs")
	must(t, os.WriteFile(p, b.Bytes(), 0o600))
	if out, err := exec.Command("fsck.erofs", "--extract="+filepath.Join(t.TempDir(), "x"), p).CombinedOutput(); err != nil {
		t.Errorf("fsck.erofs %s: %v\n%s", dg, err, out)
	}
}
