package fsops

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzTarRoundTrip: a tree `dsec cp` downloads from a sandbox (WriteTar) and
// uploads into one (ExtractTar) comes back as it was, by the written rules:
// directories, files (bytes and permission bits; sparse ones read as their
// zeros), symlinks (their target text, also one pointing out of the root,
// which is never followed); FIFOs are archived but not recreated, hard links
// come back as copies. Nothing outside the root changes.
func FuzzTarRoundTrip(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0x41, 2, 3, 3, 0, 4, 1, 5, 2})
	f.Add([]byte{0, 0, 0, 1, 0, 2, 1, 0xff, 3, 4, 3, 5})
	f.Add([]byte{1, 7, 6, 0, 2, 9, 5, 5})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := newSandbox(t)
		src := s.host("src")
		if err := os.Mkdir(src, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs, files := []string{src}, []string(nil)
		targets := []string{s.outside, "../../outside/secret", "/etc/passwd", "x", ".", ".."}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			name := filepath.Join(dirs[int(arg)%len(dirs)], fmt.Sprintf("e%d", i))
			var err error
			switch op % 7 {
			case 0:
				if err = os.Mkdir(name, 0o700|os.FileMode(arg)&0o55); err == nil {
					dirs = append(dirs, name)
				}
			case 1:
				err = os.WriteFile(name, bytes.Repeat([]byte{arg}, int(arg)*11), 0o600)
				files = append(files, name)
			case 2: // sparse
				var fl *os.File
				if fl, err = os.Create(name); err == nil {
					_, err = fl.WriteAt([]byte("end"), int64(arg)<<10)
					fl.Close()
					files = append(files, name)
				}
			case 3:
				err = os.Symlink(targets[int(arg)%len(targets)], name)
			case 4:
				err = unix.Mkfifo(name, 0o644)
			case 5:
				if len(files) > 0 {
					err = os.Link(files[int(arg)%len(files)], name)
				}
			case 6:
				if len(files) > 0 {
					err = os.Chmod(files[int(arg)%len(files)], os.FileMode(arg)&0o777|0o400)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		var b bytes.Buffer
		if err := s.fs.WriteTar("/src", &b); err != nil {
			t.Fatalf("tar: %v", err)
		}
		if err := s.fs.ExtractTar("/dst", &b); err != nil {
			t.Fatalf("extract: %v", err)
		}
		s.checkOutside(t)
		want := describeTree(t, src, true)
		if got := describeTree(t, filepath.Join(s.host("dst"), "src"), false); got != want {
			t.Fatalf("round trip:\n%s\nwant\n%s", got, want)
		}
	})
}

// describeTree lists a tree's entries: path, type, permission bits, file
// bytes, link targets. skipFIFOs leaves FIFOs out (extraction skips them).
func describeTree(t *testing.T, root string, skipFIFOs bool) string {
	var b bytes.Buffer
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skipFIFOs && d.Type()&fs.ModeNamedPipe != 0 {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v", rel, d.Type())
		switch {
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %o %x", fi.Mode().Perm(), data)
		case d.IsDir():
			fmt.Fprintf(&b, " %o", fi.Mode().Perm())
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
