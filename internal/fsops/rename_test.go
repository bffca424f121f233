package fsops

import (
	"os"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestRename(t *testing.T) {
	s := newSandbox(t)
	s.write(t, "/a", "A")
	if err := s.fs.Rename("/a", "/b"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.read(t, "/b"); err != nil || got != "A" {
		t.Fatalf("/b = %q, %v", got, err)
	}
	if _, err := os.Lstat(s.host("a")); !os.IsNotExist(err) {
		t.Fatal("/a still exists")
	}
	// Replacing an existing file.
	s.write(t, "/c", "C")
	if err := s.fs.Rename("/b", "c"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.read(t, "/c"); got != "A" {
		t.Fatalf("/c = %q after replace", got)
	}
	// A directory moves with its content, into another directory.
	if err := s.fs.Mkdir("/d/e", 0, true); err != nil {
		t.Fatal(err)
	}
	s.write(t, "/d/e/f", "F")
	if err := s.fs.Mkdir("/x", 0, false); err != nil {
		t.Fatal(err)
	}
	if err := s.fs.Rename("/d", "/x/d2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.read(t, "/x/d2/e/f"); got != "F" {
		t.Fatalf("/x/d2/e/f = %q", got)
	}
	// Same path: a no-op, but a missing source is still not_found.
	if err := s.fs.Rename("/c", "/c"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.fs.Rename("/nope", "/nope"), api.CodeNotFound)
	s.checkOutside(t)
}

func TestRenameErrors(t *testing.T) {
	s := newSandbox(t)
	s.write(t, "/f", "x")
	s.fs.Mkdir("/dir/sub", 0, true)
	s.write(t, "/dir/sub/g", "y")
	s.fs.Mkdir("/empty", 0, false)
	for _, tc := range []struct {
		from, to string
		code     api.Code
	}{
		{"/", "/x", api.CodeInvalidArgument},
		{"/f", "/", api.CodeInvalidArgument},
		{"/f", "/../..", api.CodeInvalidArgument},
		{"", "/x", api.CodeInvalidArgument},
		{"/f", "/x\x00", api.CodeInvalidArgument},
		{"/nope", "/x", api.CodeNotFound},
		{"/f", "/missing/x", api.CodeNotFound},
		{"/dir", "/dir/sub/in", api.CodeInvalidArgument}, // into itself
		{"/empty", "/dir", api.CodeConflict},             // over a non-empty directory
		{"/dir", "/f", api.CodeInvalidArgument},          // a directory over a file (ENOTDIR)
		{"/f", "/empty", api.CodeInvalidArgument},        // a file over a directory (EISDIR)
		{"/f", "/f/x", api.CodeInvalidArgument},          // parent is a file (ENOTDIR)
	} {
		err := s.fs.Rename(tc.from, tc.to)
		if errCode(err) != tc.code {
			t.Errorf("Rename(%q, %q) = %v (%s), want %s", tc.from, tc.to, err, errCode(err), tc.code)
		}
	}
	// Nothing moved.
	if got, _ := s.read(t, "/f"); got != "x" {
		t.Fatalf("/f = %q", got)
	}
	if got, _ := s.read(t, "/dir/sub/g"); got != "y" {
		t.Fatalf("/dir/sub/g = %q", got)
	}
	s.checkOutside(t)
}

// A symlinked parent or an absolute symlink cannot lead a rename outside the root,
// in either direction; a symlink itself is moved, not its target.
func TestRenameEscape(t *testing.T) {
	s := newSandbox(t)
	os.Symlink(s.outside, s.host("out"))      // host path: resolves inside the root, to nothing
	os.Symlink("../../outside", s.host("up")) // climbs: clamped at the root
	os.Symlink("/", s.host("rootlink"))
	s.write(t, "/in", "mine")
	wantCode(t, s.fs.Rename("/out/secret", "/stolen"), api.CodeNotFound)
	wantCode(t, s.fs.Rename("/up/secret", "/stolen"), api.CodeNotFound)
	wantCode(t, s.fs.Rename("/in", "/out/planted"), api.CodeNotFound)
	// Through "/rootlink", /in resolves to the sandbox's own /in.
	if err := s.fs.Rename("/rootlink/in", "/rootlink/in2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.read(t, "/in2"); got != "mine" {
		t.Fatalf("/in2 = %q", got)
	}
	// Renaming a symlink moves the link.
	if err := s.fs.Rename("/out", "/out2"); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(s.host("out2")); err != nil || l != s.outside {
		t.Fatalf("moved link = %q, %v", l, err)
	}
	s.checkOutside(t)
}
