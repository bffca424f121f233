package layer_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/pkg/api"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// makeTree builds a source directory with every kind of entry.
func makeTree(t *testing.T) string {
	d := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(d, "etc/sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(d, "etc/hostname"), []byte("dsec\n"), 0o644))
	big := bytes.Repeat([]byte("0123456789abcdef"), 70000)
	must(t, os.WriteFile(filepath.Join(d, "big.bin"), big, 0o600))
	must(t, os.WriteFile(filepath.Join(d, "empty"), nil, 0o640))
	must(t, os.WriteFile(filepath.Join(d, "suid"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chmod(filepath.Join(d, "suid"), 0o4755))
	must(t, os.Mkdir(filepath.Join(d, "tmp"), 0o777))
	must(t, os.Chmod(filepath.Join(d, "tmp"), 0o1777))
	must(t, os.Symlink("etc/hostname", filepath.Join(d, "link")))
	must(t, os.Symlink("/nonexistent/target", filepath.Join(d, "dangling")))
	must(t, os.Link(filepath.Join(d, "etc/hostname"), filepath.Join(d, "etc/hardlink")))
	must(t, os.Chown(filepath.Join(d, "etc/sub"), 1234, 5678))
	must(t, os.Lchown(filepath.Join(d, "link"), 42, 43))
	if os.Getuid() == 0 {
		must(t, unix.Mknod(filepath.Join(d, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		must(t, unix.Mkfifo(filepath.Join(d, "fifo"), 0o644))
		if err := unix.Lsetxattr(filepath.Join(d, "etc/hostname"), "user.dsec", []byte("v1"), 0); err != nil {
			t.Logf("no user xattrs here: %v", err)
		}
		if err := unix.Lsetxattr(filepath.Join(d, "big.bin"), "trusted.dsec", []byte("t"), 0); err != nil {
			t.Logf("no trusted xattrs here: %v", err)
		}
	}
	return d
}

type entry struct {
	Mode     uint32
	UID, GID uint32
	Rdev     uint64
	Size     int64
	Link     string
	Sum      string
	Xattrs   string
}

// snapshot describes a tree (hard links are compared by content).
func snapshot(t *testing.T, root string) map[string]entry {
	out := map[string]entry{}
	must(t, filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		e := entry{Mode: st.Mode, UID: st.Uid, GID: st.Gid}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			must(t, err)
			e.Size, e.Sum = int64(len(b)), blob.FromBytes(b)
		case unix.S_IFLNK:
			e.Link, _ = os.Readlink(p)
		case unix.S_IFCHR, unix.S_IFBLK:
			e.Rdev = st.Rdev
		}
		if rel != "." {
			var xs []string
			sz, _ := unix.Llistxattr(p, make([]byte, 4096))
			if sz > 0 {
				buf := make([]byte, sz)
				unix.Llistxattr(p, buf)
				for _, k := range strings.Split(strings.TrimRight(string(buf), "\x00"), "\x00") {
					v := make([]byte, 256)
					n, _ := unix.Lgetxattr(p, k, v)
					xs = append(xs, k+"="+string(v[:max(n, 0)]))
				}
			}
			sort.Strings(xs)
			e.Xattrs = strings.Join(xs, ",")
		}
		out[rel] = e
		return nil
	}))
	return out
}

// mountLayer mounts a stored layer file-backed (no loop device) and returns its dir.
func mountLayer(t *testing.T, store blob.Store, dg string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("mounting needs root")
	}
	rc, err := store.Open(context.Background(), dg)
	must(t, err)
	f, err := os.CreateTemp(t.TempDir(), "layer-*.erofs")
	must(t, err)
	io.Copy(f, rc)
	rc.Close()
	f.Close()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "erofs", "-o", "ro", f.Name(), mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount -t erofs %s: %v: %s", f.Name(), err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	return mnt
}

func compare(t *testing.T, want, got map[string]entry) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s missing in layer", k)
			continue
		}
		if k == "." {
			w.Mode, g.Mode = w.Mode&unix.S_IFMT, g.Mode&unix.S_IFMT
		}
		if w != g {
			t.Errorf("%s: want %+v\n got %+v", k, w, g)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: extra entry in layer", k)
		}
	}
}

func newStore(t *testing.T) blob.Store {
	s, err := blob.NewDir(t.TempDir())
	must(t, err)
	return s
}

func TestBuildFromDirMountsAndMatches(t *testing.T) {
	src := makeTree(t)
	store := newStore(t)
	var prog int64
	l, err := layer.Build(context.Background(), layer.Source{Kind: "dir", Arg: src}, store, layer.Options{Progress: func(n int64) { prog = n }})
	must(t, err)
	if n, err := store.Stat(context.Background(), l.Digest); err != nil || n != l.Size {
		t.Fatalf("stored size %d vs %d: %v", n, l.Size, err)
	}
	if prog != l.ContentSize || prog < 1_000_000 {
		t.Fatalf("progress %d, content %d", prog, l.ContentSize)
	}
	// The chunk index beside the layer pins every 64 KiB chunk of it.
	rc, err := store.Open(context.Background(), l.Index)
	must(t, err)
	ixb, _ := io.ReadAll(rc)
	rc.Close()
	ix, err := blob.ParseChunkIndex(ixb)
	must(t, err)
	if ix.BlobSize != l.Size || ix.ChunkSize != blob.DefaultIndexChunk || int64(len(ix.Hashes)) != ix.Chunks() || ix.Chunks() < 2 {
		t.Fatalf("index: size %d chunk %d hashes %d for a %d-byte layer", ix.BlobSize, ix.ChunkSize, len(ix.Hashes), l.Size)
	}
	// Reproducible: the same tree gives the same digest.
	l2, err := layer.Build(context.Background(), layer.Source{Kind: "dir", Arg: src}, store, layer.Options{})
	must(t, err)
	if l2.Digest != l.Digest {
		t.Fatalf("not reproducible: %s vs %s", l.Digest, l2.Digest)
	}
	mnt := mountLayer(t, store, l.Digest)
	compare(t, snapshot(t, src), snapshot(t, mnt))
}

func writeTar(t *testing.T, p string, entries []tar.Header, data map[string]string) {
	f, err := os.Create(p)
	must(t, err)
	tw := tar.NewWriter(f)
	for _, h := range entries {
		h := h
		if c, ok := data[h.Name]; ok {
			h.Size = int64(len(c))
		}
		must(t, tw.WriteHeader(&h))
		if c, ok := data[h.Name]; ok {
			tw.Write([]byte(c))
		}
	}
	must(t, tw.Close())
	must(t, f.Close())
}

func TestBuildFromTarMatchesDir(t *testing.T) {
	src := makeTree(t)
	tarPath := filepath.Join(t.TempDir(), "src.tar.gz")
	// GNU tar keeps xattrs, owners, devices and hard links.
	if out, err := exec.Command("tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-czf", tarPath, "-C", src, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	store := newStore(t)
	l, err := layer.Build(context.Background(), layer.Source{Kind: "tar", Arg: tarPath}, store, layer.Options{})
	must(t, err)
	want, got := snapshot(t, src), snapshot(t, mountLayer(t, store, l.Digest))
	for _, m := range []map[string]entry{want, got} { // GNU tar here does not archive user.* xattrs; PAX xattrs are checked in the OCI test
		for k, e := range m {
			e.Xattrs = ""
			m[k] = e
		}
	}
	compare(t, want, got)
}

// ociImage builds a two-layer image: the second deletes a file (whiteout) and makes
// a directory opaque.
func ociImage(t *testing.T) v1.Image {
	tarLayer := func(hs []tar.Header, data map[string]string) v1.Layer {
		p := filepath.Join(t.TempDir(), "l.tar")
		writeTar(t, p, hs, data)
		l, err := tarball.LayerFromFile(p)
		must(t, err)
		return l
	}
	now := time.Unix(1700000000, 0)
	l1 := tarLayer([]tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "etc/keep", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now, Format: tar.FormatPAX, PAXRecords: map[string]string{"SCHILY.xattr.user.dsec": "x1"}},
		{Name: "etc/gone", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
		{Name: "opq/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "opq/old", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "bin/tool", Typeflag: tar.TypeReg, Mode: 0o755, Uid: 7, Gid: 8, ModTime: now},
		{Name: "bin/tool2", Typeflag: tar.TypeLink, Linkname: "bin/tool", Mode: 0o755, Uid: 7, Gid: 8, ModTime: now},
	}, map[string]string{"etc/keep": "keep", "etc/gone": "gone", "opq/old": "old", "bin/tool": "TOOL"})
	l2 := tarLayer([]tar.Header{
		{Name: "etc/.wh.gone", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
		{Name: "opq/", Typeflag: tar.TypeDir, Mode: 0o700, ModTime: now},
		{Name: "opq/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
		{Name: "opq/new", Typeflag: tar.TypeReg, Mode: 0o600, ModTime: now},
		{Name: "etc/added", Typeflag: tar.TypeSymlink, Linkname: "keep", ModTime: now},
	}, map[string]string{"opq/new": "new"})
	img, err := mutate.AppendLayers(empty.Image, l1, l2)
	must(t, err)
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/opt/tool/bin:/usr/bin:/bin", "JAVA_HOME=/opt/jdk"},
		WorkingDir: "/work", User: "1000", Entrypoint: []string{"/bin/tool"}, Cmd: []string{"--help"}})
	must(t, err)
	return img
}

// checkConfig: the image config ociImage sets is kept with the layer.
func checkConfig(t *testing.T, l layer.Result) {
	t.Helper()
	c := l.Config
	if c == nil || !slices.Equal(c.Env, []string{"PATH=/opt/tool/bin:/usr/bin:/bin", "JAVA_HOME=/opt/jdk"}) || c.WorkingDir != "/work" ||
		c.User != "1000" || !slices.Equal(c.Entrypoint, []string{"/bin/tool"}) || !slices.Equal(c.Cmd, []string{"--help"}) {
		t.Errorf("image config not kept: %+v", c)
	}
}

func checkFlattened(t *testing.T, mnt string) {
	t.Helper()
	for p, want := range map[string]string{"etc/keep": "keep", "opq/new": "new", "bin/tool": "TOOL", "bin/tool2": "TOOL"} {
		b, err := os.ReadFile(filepath.Join(mnt, p))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", p, b, err)
		}
	}
	for _, p := range []string{"etc/gone", "opq/old", "etc/.wh.gone", "opq/.wh..wh..opq"} {
		if _, err := os.Lstat(filepath.Join(mnt, p)); err == nil {
			t.Errorf("%s should be gone", p)
		}
	}
	if l, _ := os.Readlink(filepath.Join(mnt, "etc/added")); l != "keep" {
		t.Errorf("symlink = %q", l)
	}
	v := make([]byte, 16)
	if n, err := unix.Lgetxattr(filepath.Join(mnt, "etc/keep"), "user.dsec", v); err != nil || string(v[:n]) != "x1" {
		t.Errorf("xattr from PAX: %q %v", v, err)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(mnt, "bin/tool2"), &st))
	if st.Uid != 7 || st.Gid != 8 || st.Mode&0o7777 != 0o755 {
		t.Errorf("hard link metadata %+v", st)
	}
	must(t, unix.Lstat(filepath.Join(mnt, "opq"), &st))
	if st.Mode&0o777 != 0o700 {
		t.Errorf("opq mode %o", st.Mode)
	}
}

func TestBuildFromOCILayoutAndDockerArchive(t *testing.T) {
	img := ociImage(t)
	lp := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(lp, empty.Index)
	must(t, err)
	must(t, p.AppendImage(img))
	store := newStore(t)
	l, err := layer.Build(context.Background(), layer.Source{Kind: "oci-layout", Arg: lp}, store, layer.Options{})
	must(t, err)
	checkFlattened(t, mountLayer(t, store, l.Digest))
	checkConfig(t, l)

	ap := filepath.Join(t.TempDir(), "img.tar")
	tag, _ := name.NewTag("dsec.test/flat:v1")
	must(t, tarball.WriteToFile(ap, tag, img))
	l2, err := layer.Build(context.Background(), layer.Source{Kind: "docker-archive", Arg: ap}, store, layer.Options{})
	must(t, err)
	if l2.Digest != l.Digest {
		t.Errorf("docker-archive and oci-layout of one image differ: %s vs %s", l2.Digest, l.Digest)
	}
	checkConfig(t, l2)

	// A directory has no image config; a config that is not KEY=VALUE is refused.
	if ld, err := layer.Build(context.Background(), layer.Source{Kind: "dir", Arg: t.TempDir()}, store, layer.Options{}); err != nil || ld.Config != nil {
		t.Errorf("dir layer config %+v, %v", ld.Config, err)
	}
	bad, err := mutate.Config(img, v1.Config{Env: []string{"NOEQUALS"}})
	must(t, err)
	bp := filepath.Join(t.TempDir(), "bad")
	p, err = layout.Write(bp, empty.Index)
	must(t, err)
	must(t, p.AppendImage(bad))
	if _, err := layer.Build(context.Background(), layer.Source{Kind: "oci-layout", Arg: bp}, store, layer.Options{}); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Errorf("bad image config: %v", err)
	}
}

func TestBuildFromRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref := fmt.Sprintf("%s/dsec/flat:v1", u.Host)
	r, _ := name.ParseReference(ref)
	must(t, remote.Write(r, ociImage(t)))
	store := newStore(t)
	l, err := layer.Build(context.Background(), layer.Source{Kind: "oci", Arg: ref}, store, layer.Options{})
	must(t, err)
	checkFlattened(t, mountLayer(t, store, l.Digest))
	checkConfig(t, l)

	_, err = layer.Build(context.Background(), layer.Source{Kind: "oci", Arg: u.Host + "/dsec/missing:v1"}, store, layer.Options{})
	if !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("missing image: %v (%s)", err, errdefs.CodeOf(err))
	}
	srv.Close()
	_, err = layer.Build(context.Background(), layer.Source{Kind: "oci", Arg: ref}, store, layer.Options{})
	if ae := errdefs.ToAPI(err); err == nil || !ae.Infrastructure {
		t.Errorf("unreachable registry: %v (%+v)", err, ae)
	}
	if got, _ := store.List(context.Background()); len(got) != 2 || !slices.Contains(got, l.Digest) || !slices.Contains(got, l.Index) {
		t.Errorf("store holds %v after failed builds, want only the layer and its index", got)
	}
}

func TestBuildErrors(t *testing.T) {
	store := newStore(t)
	_, err := layer.Build(context.Background(), layer.Source{Kind: "dir", Arg: "/nonexistent"}, store, layer.Options{})
	if !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("missing dir: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.tar")
	os.WriteFile(bad, []byte("this is not a tar file at all, just some bytes that go on for a while......................................................................................................................................................................................................................................................................................................................................................................................................................................................................................."), 0o644)
	_, err = layer.Build(context.Background(), layer.Source{Kind: "tar", Arg: bad}, store, layer.Options{})
	if !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Errorf("bad tar: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err = layer.Build(ctx, layer.Source{Kind: "dir", Arg: makeTree(t)}, store, layer.Options{}); err == nil {
		t.Error("canceled build succeeded")
	}
	if _, err := layer.ParseSource("http://x"); err == nil {
		t.Error("bad source kind accepted")
	}
}

// TestDebianBaseLayer builds the default environment's tree (made by setup.sh) into a
// layer, mounts it and compares it; it reports build time and size.
func TestDebianBaseLayer(t *testing.T) {
	src := os.Getenv("DSEC_DEBIAN_ROOTFS")
	if src == "" {
		src = "/var/lib/dsec/images/debian/rootfs"
	}
	if _, err := os.Stat(src); err != nil || testing.Short() {
		t.Skip("no debian rootfs (make setup)")
	}
	store := newStore(t)
	start := time.Now()
	l, err := layer.Build(context.Background(), layer.Source{Kind: "dir", Arg: src}, store, layer.Options{TempDir: t.TempDir()})
	must(t, err)
	t.Logf("debian base layer: %s, %d entries, %.1f MB content → %.1f MB EROFS (%d metadata chunks of 64 KiB) in %v", l.Digest[:19], l.Entries, float64(l.ContentSize)/1e6, float64(l.Size)/1e6, l.MetaChunks, time.Since(start).Round(time.Millisecond))
	mnt := mountLayer(t, store, l.Digest)
	compare(t, snapshot(t, src), snapshot(t, mnt))
	out, err := exec.Command("chroot", mnt, "/usr/bin/python3", "-c", "import json, subprocess; print(1)").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf("python3 in the layer: %v %s", err, out)
	}
	out, err = exec.Command("chroot", mnt, "git", "--version").CombinedOutput()
	if err != nil {
		t.Errorf("git in the layer: %v %s", err, out)
	}
}
