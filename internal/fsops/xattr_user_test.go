package fsops

import (
	"archive/tar"
	"bytes"
	"maps"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUserXattrs checks that ExtractTar applies the "user." attributes of a
// tar entry's PAX records, that Stat and List report them (and no others),
// that replacing the file drops them, and that a symlink reports none.
func TestUserXattrs(t *testing.T) {
	s := newSandbox(t)
	if err := unix.Setxattr(s.root, "user.probe", []byte("x"), 0); err != nil {
		t.Fatalf("the test directory's file system has no user xattrs: %v", err)
	}
	want := map[string]string{"user.e2b.author": "mish", "user.e2b.purpose": "upload"}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := "content"
	hdr := &tar.Header{Name: "f.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)),
		Format: tar.FormatPAX, PAXRecords: map[string]string{"SCHILY.xattr.user.e2b.author": "mish",
			"SCHILY.xattr.user.e2b.purpose": "upload", "SCHILY.xattr.trusted.evil": "no"}}
	if err := tw.WriteHeader(hdr); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(body))
	if err := tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX,
		PAXRecords: map[string]string{"SCHILY.xattr.user.tag": "dir"}}); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	if err := s.fs.ExtractTar("/w", &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Lgetxattr(s.host("/w/f.txt"), "trusted.evil", make([]byte, 8)); err == nil {
		t.Error("a trusted.* attribute of the tar was applied")
	}
	fi, err := s.fs.Stat("/w/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(fi.Xattrs, want) {
		t.Errorf("Stat xattrs = %v, want %v", fi.Xattrs, want)
	}
	list, err := s.fs.List("/w")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, e := range list {
		got[e.Name] = e.Xattrs
	}
	if !maps.Equal(got["f.txt"], want) || !maps.Equal(got["d"], map[string]string{"user.tag": "dir"}) {
		t.Errorf("List xattrs = %v", got)
	}

	if err := os.Symlink("f.txt", s.host("/w/l")); err != nil {
		t.Fatal(err)
	}
	if fi, err := s.fs.Stat("/w/l"); err != nil || fi.Xattrs != nil {
		t.Errorf("Stat symlink = %+v, %v; want no xattrs", fi, err)
	}
	if _, err := s.fs.WriteFile("/w/f.txt", 0, bytes.NewReader([]byte("new")), 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := s.fs.Stat("/w/f.txt"); err != nil || fi.Xattrs != nil {
		t.Errorf("after WriteFile: xattrs %v, %v; want none", fi.Xattrs, err)
	}
	s.checkOutside(t)
}

// TestWriteTarKeepsUserXattrs: WriteTar carries the "user." attributes of
// files and directories as PAX records (and no trusted.* ones), so a tree
// written and extracted elsewhere keeps them.
func TestWriteTarKeepsUserXattrs(t *testing.T) {
	s := newSandbox(t)
	if err := os.MkdirAll(s.host("/w/d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.host("/w/d/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for p, v := range map[string]string{"/w/d": "dir", "/w/d/f": "file"} {
		if err := unix.Setxattr(s.host(p), "user.tag", []byte(v), 0); err != nil {
			t.Fatalf("the test directory's file system has no user xattrs: %v", err)
		}
	}
	if err := unix.Setxattr(s.host("/w/d/f"), "trusted.hidden", []byte("no"), 0); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.fs.WriteTar("/w/d", &buf); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		got[hdr.Name] = hdr.PAXRecords
	}
	want := map[string]map[string]string{"d/": {"SCHILY.xattr.user.tag": "dir"}, "d/f": {"SCHILY.xattr.user.tag": "file"}}
	if len(got) != len(want) || !maps.Equal(got["d/"], want["d/"]) || !maps.Equal(got["d/f"], want["d/f"]) {
		t.Errorf("PAX records %v, want %v", got, want)
	}
}
