package fsops

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// tarEntry describes one entry of a test tar.
type tarEntry struct {
	name, link, body string
	typ              byte
	mode             int64
}

func buildTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: mode,
			ModTime: time.Unix(1600000000, 0)}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// snapshot describes a host tree for comparison (relative name → description).
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		d := fi.Mode().String()
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			d += " -> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			d += " " + string(b) + " " + fi.ModTime().UTC().Format(time.RFC3339)
		case fi.IsDir() && rel != ".":
			d += " " + fi.ModTime().UTC().Format(time.RFC3339)
		}
		out[rel] = d
		return nil
	})
	return out
}

func TestTarRoundTrip(t *testing.T) {
	s := newSandbox(t)
	os.MkdirAll(s.host("work/src/deep"), 0o755)
	os.WriteFile(s.host("work/src/main.go"), []byte("package main"), 0o644)
	os.WriteFile(s.host("work/run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(s.host("work/src/deep/empty"), nil, 0o600)
	os.Chmod(s.host("work/src/deep/empty"), 0o4750)
	os.Symlink("src/main.go", s.host("work/link"))
	os.Symlink(s.outside, s.host("work/evil")) // archived as a symlink, not followed
	os.Mkdir(s.host("work/private"), 0o700)
	os.Chown(s.host("work/run.sh"), 1000, 1001)
	old := time.Date(2019, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, p := range []string{"work/src/main.go", "work/src/deep", "work/private", "work/src/deep/empty"} {
		os.Chtimes(s.host(p), old, old)
	}

	var buf bytes.Buffer
	if err := s.fs.WriteTar("/work", &buf); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if !strings.HasPrefix(hdr.Name, "work/") {
			t.Fatalf("entry %q lacks the work/ prefix", hdr.Name)
		}
		if hdr.Name == "work/run.sh" && (hdr.Uid != 1000 || hdr.Gid != 1001 || hdr.Mode != 0o755) {
			t.Fatalf("run.sh header = %+v", hdr)
		}
		if hdr.Name == "work/evil" && (hdr.Typeflag != tar.TypeSymlink || hdr.Linkname != s.outside) {
			t.Fatalf("evil header = %+v", hdr)
		}
	}
	if len(names) != 9 {
		t.Fatalf("entries = %v", names)
	}

	if err := s.fs.ExtractTar("/restore/here", bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	want, got := snapshot(t, s.host("work")), snapshot(t, s.host("restore/here/work"))
	if len(want) != len(got) {
		t.Fatalf("trees differ:\nwant %v\n got %v", want, got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q want %q", k, got[k], v)
		}
	}
	info, err := s.fs.Stat("/restore/here/work/run.sh")
	if err != nil || info.UID != 1000 || info.GID != 1001 {
		t.Fatalf("ownership not restored: %+v %v", info, err)
	}
	s.checkOutside(t)
}

func TestTarSingleFileAndRoot(t *testing.T) {
	s := newSandbox(t)
	os.MkdirAll(s.host("a/b"), 0o755)
	os.WriteFile(s.host("a/b/f.txt"), []byte("data"), 0o640)
	os.Symlink("/a/b/f.txt", s.host("fl"))
	for _, tc := range []struct{ path, want string }{
		{"/a/b/f.txt", "f.txt"},
		{"/fl", "fl"}, // top-level symlink is followed, named after the path
	} {
		var buf bytes.Buffer
		if err := s.fs.WriteTar(tc.path, &buf); err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(&buf)
		hdr, err := tr.Next()
		if err != nil || hdr.Name != tc.want || hdr.Size != 4 || hdr.Mode != 0o640 {
			t.Fatalf("%s: hdr = %+v %v", tc.path, hdr, err)
		}
		b, _ := io.ReadAll(tr)
		if string(b) != "data" {
			t.Fatalf("body = %q", b)
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Fatalf("more entries: %v", err)
		}
	}
	var buf bytes.Buffer
	if err := s.fs.WriteTar("/", &buf); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != "a/" {
		t.Fatalf("first entry of / = %+v %v", hdr, err)
	}
	err = s.fs.WriteTar("/nope", &bytes.Buffer{})
	wantCode(t, err, api.CodeNotFound)
}

func TestExtractGzipAndMetadata(t *testing.T) {
	s := newSandbox(t)
	plain := buildTar(t,
		tarEntry{name: "./", typ: tar.TypeDir, mode: 0o700},
		tarEntry{name: "/abs/file", body: "abs"},
		tarEntry{name: "d/", typ: tar.TypeDir, mode: 0o750},
		tarEntry{name: "d/x", body: "xx", mode: 0o600},
		tarEntry{name: "d/hl", link: "d/x", typ: tar.TypeLink},
		tarEntry{name: "implicit/parent/f", body: "f"},
		tarEntry{name: "dev", typ: tar.TypeChar},
		tarEntry{name: "fifo", typ: tar.TypeFifo},
	)
	for i, data := range [][]byte{plain, gz(plain)} {
		dst := []string{"/plain", "/gz"}[i]
		if err := s.fs.ExtractTar(dst, bytes.NewReader(data)); err != nil {
			t.Fatalf("%s: %v", dst, err)
		}
		if b, err := os.ReadFile(s.host(dst + "/abs/file")); err != nil || string(b) != "abs" {
			t.Fatalf("%s: abs/file = %q %v", dst, b, err)
		}
		fi, err := os.Stat(s.host(dst + "/d/x"))
		if err != nil || fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(time.Unix(1600000000, 0)) {
			t.Fatalf("%s: d/x = %v %v", dst, fi, err)
		}
		hl, err := os.Stat(s.host(dst + "/d/hl"))
		if err != nil || !os.SameFile(fi, hl) {
			t.Fatalf("%s: hard link not created: %v", dst, err)
		}
		if fi, err := os.Stat(s.host(dst + "/d")); err != nil || fi.Mode().Perm() != 0o750 || !fi.ModTime().Equal(time.Unix(1600000000, 0)) {
			t.Fatalf("%s: d = %v %v", dst, fi, err)
		}
		if fi, err := os.Stat(s.host(dst)); err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: extraction dir mode changed: %v", dst, fi.Mode())
		}
		for _, skipped := range []string{"dev", "fifo"} {
			if _, err := os.Lstat(s.host(dst + "/" + skipped)); !os.IsNotExist(err) {
				t.Fatalf("%s: %s was created", dst, skipped)
			}
		}
	}
	// Broken input.
	wantCode(t, s.fs.ExtractTar("/bad", bytes.NewReader([]byte{0x1f, 0x8b, 1, 2})), api.CodeInvalidArgument)
	wantCode(t, s.fs.ExtractTar("/bad", bytes.NewReader(bytes.Repeat([]byte("x"), 1024))), api.CodeInvalidArgument)
	if err := s.fs.ExtractTar("/empty", bytes.NewReader(nil)); err != nil {
		t.Fatalf("empty input: %v", err)
	}
	// Replacing existing entries: a file over a symlink, a dir over a file.
	os.Symlink(filepath.Join(s.outside, "secret"), s.host("plain/d/x2"))
	err := s.fs.ExtractTar("/plain", bytes.NewReader(buildTar(t,
		tarEntry{name: "d/x2", body: "replaced"},
		tarEntry{name: "abs/file", typ: tar.TypeDir},
	)))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(s.host("plain/d/x2")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("symlink not replaced: %v %v", fi, err)
	}
	if fi, err := os.Lstat(s.host("plain/abs/file")); err != nil || !fi.IsDir() {
		t.Fatalf("file not replaced by dir: %v %v", fi, err)
	}
	s.checkOutside(t)
}

func TestExtractMalicious(t *testing.T) {
	cases := map[string][]tarEntry{
		"dotdot":        {{name: "../x", body: "pwned"}},
		"dotdot-nested": {{name: "a/../../x", body: "pwned"}},
		"dotdot-deep":   {{name: "a/b/../../../../../outside/pwned", body: "pwned"}},
		"symlink-then-file": {
			{name: "s", link: "/outside", typ: tar.TypeSymlink},
			{name: "s/pwned", body: "pwned"},
		},
		"symlink-hostpath-then-file": {
			{name: "s", link: "HOSTOUTSIDE", typ: tar.TypeSymlink},
			{name: "s/pwned", body: "pwned"},
			{name: "s/secret", body: "pwned"},
		},
		"symlink-dotdot-then-file": {
			{name: "s", link: "../../../../../../..", typ: tar.TypeSymlink},
			{name: "s/HOSTOUTSIDE/pwned", body: "pwned"},
		},
		"symlink-then-dir": {
			{name: "s", link: "HOSTOUTSIDE", typ: tar.TypeSymlink},
			{name: "s/newdir/", typ: tar.TypeDir},
		},
		"symlink-then-hardlink-via": {
			{name: "s", link: "HOSTOUTSIDE", typ: tar.TypeSymlink},
			{name: "h", link: "s/secret", typ: tar.TypeLink},
		},
		"hardlink-passwd": {{name: "h", link: "../../etc/passwd", typ: tar.TypeLink}},
		"hardlink-abs":    {{name: "h", link: "HOSTOUTSIDE/secret", typ: tar.TypeLink}},
		"symlink-overwrite-secret": {
			{name: "x", link: "HOSTOUTSIDE/secret", typ: tar.TypeSymlink},
			{name: "x", body: "pwned"},
		},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			s := newSandbox(t)
			for i := range entries {
				entries[i].name = strings.ReplaceAll(entries[i].name, "HOSTOUTSIDE", s.outside)
				entries[i].link = strings.ReplaceAll(entries[i].link, "HOSTOUTSIDE", s.outside)
			}
			data := buildTar(t, entries...)
			for _, dst := range []string{"/dst", "/", "/a/b"} {
				err := s.fs.ExtractTar(dst, bytes.NewReader(data))
				if err != nil && !strings.HasPrefix(name, "symlink-overwrite") {
					if c := api.CodeInvalidArgument; !isCode(err, c) && !isCode(err, api.CodeNotFound) {
						t.Fatalf("%s: unexpected error class: %v", dst, err)
					}
				}
			}
			s.checkOutside(t)
			// Nothing named pwned outside the extraction dirs' subtrees may exist
			// outside the root, and the secret never shows up inside it.
			filepath.Walk(s.root, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					if b, _ := os.ReadFile(p); string(b) == secret {
						t.Fatalf("secret copied into the root at %s", p)
					}
				}
				return nil
			})
		})
	}
}

func TestExtractDotdotError(t *testing.T) {
	s := newSandbox(t)
	err := s.fs.ExtractTar("/dst", bytes.NewReader(buildTar(t, tarEntry{name: "a/../../x", body: "x"})))
	wantCode(t, err, api.CodeInvalidArgument)
	err = s.fs.ExtractTar("/dst", bytes.NewReader(buildTar(t,
		tarEntry{name: "s", link: "/", typ: tar.TypeSymlink},
		tarEntry{name: "s/pwned", body: "x"})))
	wantCode(t, err, api.CodeInvalidArgument)
	if _, err := os.Lstat(s.host("pwned")); !os.IsNotExist(err) {
		t.Fatal("entry traversed a symlink")
	}
	err = s.fs.ExtractTar("/dst", bytes.NewReader(buildTar(t, tarEntry{name: "h", link: "../../etc/passwd", typ: tar.TypeLink})))
	wantCode(t, err, api.CodeInvalidArgument)
}

func isCode(err error, code api.Code) bool { return errCode(err) == code }
