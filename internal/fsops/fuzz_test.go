package fsops

import (
	"archive/tar"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzExtractTar(f *testing.F) {
	f.Add(buildTar(f, tarEntry{name: "a/b/c", body: "hello"}))
	f.Add(buildTar(f,
		tarEntry{name: "d/", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "d/f", body: "x"},
		tarEntry{name: "d/l", link: "f", typ: tar.TypeSymlink},
		tarEntry{name: "d/h", link: "d/f", typ: tar.TypeLink}))
	f.Add(gz(buildTar(f, tarEntry{name: "z", body: "gz"})))
	f.Add(buildTar(f, tarEntry{name: "../x", body: "x"}))
	f.Add(buildTar(f, tarEntry{name: "a/../../x", body: "x"}))
	f.Add(buildTar(f,
		tarEntry{name: "s", link: "../outside", typ: tar.TypeSymlink},
		tarEntry{name: "s/pwned", body: "x"}))
	f.Add(buildTar(f,
		tarEntry{name: "s", link: "../../../../..", typ: tar.TypeSymlink},
		tarEntry{name: "s/tmp/pwned", body: "x"}))
	f.Add(buildTar(f, tarEntry{name: "h", link: "../../etc/passwd", typ: tar.TypeLink}))
	f.Add([]byte{})
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSandbox(t)
		// A planted escape symlink inside the extraction directory.
		os.MkdirAll(s.host("dst"), 0o755)
		os.Symlink(s.outside, s.host("dst/evil"))
		os.Symlink("../../outside", s.host("dst/rel"))
		_ = s.fs.ExtractTar("/dst", bytes.NewReader(data))
		s.checkOutside(t)
		// Nothing may be created in the root besides dst.
		ents, err := os.ReadDir(s.root)
		if err != nil || len(ents) != 1 || ents[0].Name() != "dst" {
			t.Fatalf("root holds %v (%v)", ents, err)
		}
	})
}

// FuzzExtractTarEntries builds well-formed tars (valid checksums) from fuzzed entry
// names, types and link targets, which raw-byte fuzzing rarely reaches: three
// entries, so one can plant a symlink or directory that a later one tries to use.
func FuzzExtractTarEntries(f *testing.F) {
	f.Add("s", "../outside", byte(tar.TypeSymlink), "s/pwned", "", byte(tar.TypeReg), "h", "s/secret", byte(tar.TypeLink))
	f.Add("a/", "", byte(tar.TypeDir), "a/../../x", "", byte(tar.TypeReg), "b", "/", byte(tar.TypeSymlink))
	f.Add("x", "evil/secret", byte(tar.TypeLink), "evil/new", "", byte(tar.TypeReg), "rel/x/", "", byte(tar.TypeDir))
	f.Add("l", "/dst/../..", byte(tar.TypeSymlink), "l/l/pwned", "", byte(tar.TypeReg), "l", "", byte(tar.TypeDir))
	f.Fuzz(func(t *testing.T, n1, l1 string, t1 byte, n2, l2 string, t2 byte, n3, l3 string, t3 byte) {
		s := newSandbox(t)
		os.MkdirAll(s.host("dst"), 0o755)
		os.Symlink(s.outside, s.host("dst/evil"))
		os.Symlink("../../outside", s.host("dst/rel"))
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range []struct {
			name, link string
			typ        byte
		}{{n1, l1, t1}, {n2, l2, t2}, {n3, l3, t3}} {
			e.name = strings.ReplaceAll(e.name, "OUT", s.outside)
			e.link = strings.ReplaceAll(e.link, "OUT", s.outside)
			hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644}
			if e.typ == tar.TypeReg {
				hdr.Size = 5
			}
			if tw.WriteHeader(hdr) != nil {
				return
			}
			if e.typ == tar.TypeReg {
				tw.Write([]byte("pwned"))
			}
		}
		tw.Close()
		_ = s.fs.ExtractTar("/dst", bytes.NewReader(buf.Bytes()))
		s.checkOutside(t)
		ents, err := os.ReadDir(s.root)
		if err != nil || len(ents) != 1 || ents[0].Name() != "dst" {
			t.Fatalf("root holds %v (%v)", ents, err)
		}
	})
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"", "/", ".", "..", "/../../x", "a/b/../c", "a//b/./c/", "/a\x00b",
		"../../../../etc/passwd", "./.././..", "a/..", "...", "..a/b.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		clean, err := cleanPath(p)
		if p == "" || strings.IndexByte(p, 0) >= 0 {
			if err == nil {
				t.Fatalf("cleanPath(%q) accepted", p)
			}
		} else {
			if err != nil {
				t.Fatalf("cleanPath(%q): %v", p, err)
			}
			if !strings.HasPrefix(clean, "/") || path.Clean(clean) != clean {
				t.Fatalf("cleanPath(%q) = %q not clean and absolute", p, clean)
			}
			for c := range strings.SplitSeq(clean, "/") {
				if c == ".." || c == "." {
					t.Fatalf("cleanPath(%q) = %q has a %q component", p, clean, c)
				}
			}
			if again, _ := cleanPath(clean); again != clean {
				t.Fatalf("cleanPath not idempotent: %q → %q → %q", p, clean, again)
			}
			rel := relPath(clean)
			if strings.HasPrefix(rel, "/") || rel == "" {
				t.Fatalf("relPath(%q) = %q", clean, rel)
			}
			if clean != "/" {
				parent, base := splitPath(clean)
				if path.Join(parent, base) != clean || base == "" || strings.Contains(base, "/") {
					t.Fatalf("splitPath(%q) = %q, %q", clean, parent, base)
				}
			}
		}

		name, err := cleanEntryName(p)
		if err != nil {
			return
		}
		if strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 {
			t.Fatalf("cleanEntryName(%q) = %q", p, name)
		}
		if name != "" {
			for c := range strings.SplitSeq(name, "/") {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("cleanEntryName(%q) = %q has component %q", p, name, c)
				}
			}
		}
		joined := filepath.Join("/dest", name)
		if joined != "/dest" && !strings.HasPrefix(joined, "/dest/") {
			t.Fatalf("cleanEntryName(%q) = %q escapes: %q", p, name, joined)
		}
		// The lexical meaning is kept: when a path does not climb, cleaning agrees
		// with path.Clean.
		if want := strings.TrimPrefix(path.Clean("/"+p), "/"); want != name {
			t.Fatalf("cleanEntryName(%q) = %q, path.Clean gives %q", p, name, want)
		}
	})
}
