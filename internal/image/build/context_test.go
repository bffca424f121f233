package build

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestContextRoundTrip: a context written by WriteContext (with
// .dockerignore and an exception, a symlink, an extra Dockerfile) unpacks
// by ExtractContext to the same tree minus what is ignored; a tar entry that
// climbs out with ../ lands inside.
func TestContextRoundTrip(t *testing.T) {
	src := t.TempDir()
	for name, body := range map[string]string{
		"Dockerfile": "FROM x\n", ".dockerignore": "*.log\nbuild/\n!keep.log\nnode_modules\n",
		"a.txt": "a", "x.log": "log", "keep.log": "kept", "build/out": "o", "node_modules/m/i.js": "js", "sub/b.txt": "b",
	} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../a.txt", filepath.Join(src, "sub", "link")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteContext(&buf, src, map[string][]byte{"other.Dockerfile": []byte("FROM y\n")}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := ExtractContext(dst, &buf); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dst {
			rel, _ := filepath.Rel(dst, p)
			got = append(got, rel)
		}
		return err
	})
	slices.Sort(got)
	want := []string{".dockerignore", "Dockerfile", "a.txt", "keep.log", "other.Dockerfile", "sub", "sub/b.txt", "sub/link"}
	if !slices.Equal(got, want) {
		t.Fatalf("context unpacked as %q, want %q", got, want)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "sub/link")); l != "../a.txt" {
		t.Errorf("symlink target %q", l)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "a.txt")); fi.Mode().Perm() != 0o640 {
		t.Errorf("a.txt mode %v", fi.Mode())
	}
}

// TestExtractContextStaysInside: an entry climbing out with ../ lands inside;
// one written through a symlink out of the context is refused.
func TestExtractContextStaysInside(t *testing.T) {
	outside := t.TempDir()
	tarOf := func(hs ...tar.Header) *bytes.Buffer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hs {
			tw.WriteHeader(&h)
			if h.Size > 0 {
				tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		tw.Close()
		return &buf
	}
	dst := t.TempDir()
	if err := ExtractContext(dst, tarOf(tar.Header{Name: "../../climb", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, "climb")); err != nil {
		t.Fatalf("../../climb did not land inside: %v", err)
	}
	dst = t.TempDir()
	err := ExtractContext(dst, tarOf(tar.Header{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: outside},
		tar.Header{Name: "esc/planted", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}))
	if err == nil {
		t.Error("a file written through a symlink out of the context was accepted")
	}
	if _, serr := os.Stat(filepath.Join(outside, "planted")); serr == nil {
		t.Fatal("a context tar wrote outside the context")
	}
}
