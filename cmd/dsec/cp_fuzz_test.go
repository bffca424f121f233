package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/localtar"
)

// hostileTar is a tar stream of entries, each a type, name, link name and body.
func hostileTar(entries ...[4]string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e[1], Linkname: e[2], Mode: 0o644, Size: int64(len(e[3]))}
		switch e[0] {
		case "dir":
			h.Typeflag, h.Size = tar.TypeDir, 0
		case "sym":
			h.Typeflag, h.Size = tar.TypeSymlink, 0
		case "link":
			h.Typeflag, h.Size = tar.TypeLink, 0
		case "fifo":
			h.Typeflag, h.Size = tar.TypeFifo, 0
		default:
			h.Typeflag = tar.TypeReg
		}
		tw.WriteHeader(h)
		tw.Write([]byte(e[3]))
	}
	tw.Close()
	return b.Bytes()
}

// FuzzCpExtract: `dsec cp SANDBOX:PATH LOCAL` unpacks a tar the sandbox made.
// Whatever the stream holds (names with .., absolute names, symlinks out of
// the directory and files written through them, hard links, FIFOs, a
// truncated or corrupt stream), nothing is created or changed outside the
// destination, and inside it there are only directories, regular files and
// symlinks.
func FuzzCpExtract(f *testing.F) {
	for _, s := range [][]byte{
		hostileTar([4]string{"reg", "a/b.txt", "", "hi"}, [4]string{"dir", "c/", "", ""}, [4]string{"sym", "c/l", "../a/b.txt", ""}),
		hostileTar([4]string{"reg", "../escape", "", "x"}, [4]string{"reg", "/abs", "", "x"}),
		hostileTar([4]string{"sym", "out", "../host", ""}, [4]string{"reg", "out/pwned", "", "x"}),
		hostileTar([4]string{"sym", "out", "/", ""}, [4]string{"reg", "out/tmp/pwned", "", "x"}, [4]string{"dir", "out/d/", "", ""}),
		hostileTar([4]string{"sym", "s", "../host/secret", ""}, [4]string{"reg", "s", "", "overwritten"}),
		hostileTar([4]string{"link", "h", "../host/secret", ""}, [4]string{"fifo", "f", "", ""}),
		hostileTar([4]string{"dir", "..", "", ""}, [4]string{"reg", ".", "", "x"}, [4]string{"sym", "a/../../x", "y", ""}),
		[]byte("not a tar"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		base := t.TempDir()
		host, out := filepath.Join(base, "host"), filepath.Join(base, "out")
		for _, d := range []string{host, out} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host"), 0o600); err != nil {
			t.Fatal(err)
		}
		before := listTree(t, host)
		_ = extractLocalTar(out, bytes.NewReader(stream))
		if after := listTree(t, host); after != before {
			t.Fatalf("extraction changed a directory outside the destination:\n%s\nwas\n%s", after, before)
		}
		ents, err := os.ReadDir(base)
		if err != nil || len(ents) != 2 {
			t.Fatalf("extraction created %v next to the destination (%v)", ents, err)
		}
		filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			if m := d.Type(); m&^(fs.ModeDir|fs.ModeSymlink) != 0 {
				t.Fatalf("%s: extraction made a %v", p, m)
			}
			return nil
		})
	})
}

// FuzzCpRoundTrip: a local tree `dsec cp` uploads (localtar.Write) and a download
// unpacks (extractLocalTar) comes back as it was: entries, types, bytes and link
// targets (also those that point out of the tree, kept as links).
func FuzzCpRoundTrip(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 0x41, 2, 7})
	f.Add([]byte{1, 0, 1, 1, 1, 2, 0, 0, 3, 9})
	f.Fuzz(func(t *testing.T, ops []byte) {
		src := t.TempDir()
		dirs := []string{src}
		targets := []string{"../../etc/passwd", "/etc/passwd", "x", ".", "e0/e2"}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			name := filepath.Join(dirs[int(arg)%len(dirs)], fmt.Sprintf("e%d", i))
			var err error
			switch op % 3 {
			case 0:
				if err = os.Mkdir(name, 0o755); err == nil {
					dirs = append(dirs, name)
				}
			case 1:
				err = os.WriteFile(name, bytes.Repeat([]byte{arg}, int(arg)*13), 0o644)
			case 2:
				err = os.Symlink(targets[int(arg)%len(targets)], name)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		var b bytes.Buffer
		if err := localtar.Write(src, &b); err != nil {
			t.Fatal(err)
		}
		dst := t.TempDir()
		if err := extractLocalTar(dst, &b); err != nil {
			t.Fatal(err)
		}
		if a, b := listTree(t, src), listTree(t, dst); a != b {
			t.Fatalf("round trip:\n%s\nwant\n%s", b, a)
		}
	})
}

// listTree describes a tree: paths, types, file bytes and link targets.
func listTree(t *testing.T, root string) string {
	var b bytes.Buffer
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(&b, "%s %v", rel, d.Type())
		switch {
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", data)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " -> %s", target)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
