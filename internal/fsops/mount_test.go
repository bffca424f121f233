package fsops

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// TestMountPoints checks that recursive Remove and WriteTar do not descend into a
// mount point below the given path (needs CAP_SYS_ADMIN; skipped otherwise).
func TestMountPoints(t *testing.T) {
	s := newSandbox(t)
	os.MkdirAll(s.host("work/mnt"), 0o755)
	os.WriteFile(s.host("work/f"), []byte("x"), 0o644)
	if err := unix.Mount("tmpfs", s.host("work/mnt"), "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(s.host("work/mnt"), unix.MNT_DETACH) })
	os.WriteFile(s.host("work/mnt/inside"), []byte("keep"), 0o644)

	var buf bytes.Buffer
	if err := s.fs.WriteTar("/work", &buf); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
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
	}
	if len(names) != 3 || names[2] != "work/mnt/" {
		t.Fatalf("entries = %v", names)
	}
	// The mount's own contents can be archived by naming it.
	if err := s.fs.WriteTar("/work/mnt", io.Discard); err != nil {
		t.Fatal(err)
	}

	wantCode(t, s.fs.Remove("/work", true), api.CodeConflict)
	if b, err := os.ReadFile(s.host("work/mnt/inside")); err != nil || string(b) != "keep" {
		t.Fatalf("mount contents removed: %v", err)
	}
	// Naming the mount point itself empties it, then fails to remove it (busy).
	wantCode(t, s.fs.Remove("/work/mnt", true), api.CodeConflict)
	if _, err := os.Lstat(s.host("work/mnt/inside")); !os.IsNotExist(err) {
		t.Fatal("explicitly named mount point was not emptied")
	}
}
