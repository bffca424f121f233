package container

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
)

// FuzzTreeCopy: fork and commit copy a writable layer the sandbox controls
// (treeCopy). Over any tree a sandbox can make of directories, files (sparse
// ones among them), symlinks (to host paths, out of the tree, in loops), FIFOs,
// sockets' stand-ins, whiteouts and hard links, the copy never panics, never
// writes or follows anything outside its destination (a host directory the
// links point to stays as it was, a FIFO is never opened), and reproduces the
// tree: the same entries and types, file bytes, link targets, hard links as
// links, and counts that match.
func FuzzTreeCopy(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{1, 0x41, 1, 0x42, 2, 3, 2, 4, 6, 0x10})
	f.Add([]byte{0, 0, 0, 0, 1, 0xff, 5, 5, 5})
	f.Add([]byte{2, 2, 2, 3, 3, 3, 7, 7, 1, 0x80})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if os.Geteuid() != 0 {
			t.Fatal("the tree copy runs as root (mknod of whiteouts, chown)")
		}
		base := t.TempDir()
		host := filepath.Join(base, "host") // what a symlink out of the tree reaches
		src := filepath.Join(base, "src")
		dst := filepath.Join(base, "dst")
		for _, d := range []string{host, src} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host"), 0o600); err != nil {
			t.Fatal(err)
		}
		dirs := []string{src}
		var files []string
		targets := []string{host, filepath.Join(host, "secret"), "../../host/secret", "/etc/shadow", ".", "..", "loop", "missing/x"}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			parent := dirs[int(arg)%len(dirs)]
			name := filepath.Join(parent, fmt.Sprintf("e%d", i))
			var err error
			switch op % 8 {
			case 0:
				if err = os.Mkdir(name, 0o755); err == nil {
					dirs = append(dirs, name)
				}
			case 1:
				err = os.WriteFile(name, bytes.Repeat([]byte{arg}, int(arg)*37), fs.FileMode(0o600|int(arg)&0o7))
				files = append(files, name)
			case 2: // sparse: a hole, then bytes
				var fl *os.File
				if fl, err = os.Create(name); err == nil {
					_, err = fl.WriteAt([]byte("tail"), int64(arg)<<12)
					fl.Close()
					files = append(files, name)
				}
			case 3:
				err = os.Symlink(targets[int(arg)%len(targets)], name)
			case 4:
				err = unix.Mkfifo(name, 0o600)
			case 5: // a whiteout (0/0 character device)
				err = unix.Mknod(name, unix.S_IFCHR|0o000, 0)
			case 6:
				if len(files) > 0 {
					err = os.Link(files[int(arg)%len(files)], name)
				}
			case 7:
				err = unix.Setxattr(parent, "trusted.overlay.opaque", []byte("y"), 0)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		hostBefore := snapshotTree(t, host)
		var st driver.SnapshotStats
		c := treeCopy{ctx: context.Background(), links: map[uint64]string{}, st: &st}
		if err := c.copy(src, dst, "/"); err != nil {
			t.Fatalf("copy: %v", err)
		}
		if after := snapshotTree(t, host); after != hostBefore {
			t.Fatalf("the copy changed the host directory the links point to:\n%s\nwas\n%s", after, hostBefore)
		}
		if a, b := snapshotTree(t, src), snapshotTree(t, dst); a != b {
			t.Fatalf("the copy differs from the tree:\n%s\nwant\n%s", b, a)
		}
		n := 0
		filepath.WalkDir(src, func(string, fs.DirEntry, error) error { n++; return nil })
		if st.Entries != n {
			t.Fatalf("counted %d entries, the tree has %d", st.Entries, n)
		}
	})
}

// snapshotTree describes a tree without following links or opening FIFOs:
// each entry's path, type, mode, size, bytes (regular files), link target,
// opaque marker, and which entries are hard links of which.
func snapshotTree(t *testing.T, root string) string {
	var b bytes.Buffer
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var s unix.Stat_t
		if err := unix.Lstat(p, &s); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %o %d", rel, s.Mode, s.Size)
		switch s.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", data)
			if s.Nlink > 1 {
				if first, ok := inodes[s.Ino]; ok {
					fmt.Fprintf(&b, " link-of %s", first)
				} else {
					inodes[s.Ino] = rel
				}
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " -> %s", target)
		case unix.S_IFCHR:
			fmt.Fprintf(&b, " rdev %d", s.Rdev)
		case unix.S_IFDIR:
			v := make([]byte, 8)
			if n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", v); err == nil {
				fmt.Fprintf(&b, " opaque %q", v[:n])
			}
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
