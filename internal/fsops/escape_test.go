package fsops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestEscapeRead checks that no path or symlink reads the secret outside the root.
func TestEscapeRead(t *testing.T) {
	s := newSandbox(t)
	// Symlinks planted by a process in the sandbox.
	os.Symlink(s.outside, s.host("evil"))                            // absolute host path
	os.Symlink("../outside", s.host("rel"))                          // climbs out relatively
	os.Symlink("../../../../../../../../"+s.outside, s.host("deep")) // ..-chain then host path
	os.Mkdir(s.host("sub"), 0o755)
	os.Symlink("../..", s.host("sub/up"))
	os.Symlink("/proc/self/root"+s.outside, s.host("magic"))

	for _, p := range []string{
		"../outside/secret",
		"/../../outside/secret",
		"/../outside/secret",
		"evil/secret",
		"rel/secret",
		"deep/secret",
		"sub/up/outside/secret",
		"sub/up/up/outside/secret",
		"magic/secret",
		s.outside + "/secret",
		"../../../../../../../../" + s.outside + "/secret",
	} {
		got, err := s.read(t, p)
		if strings.Contains(got, secret) {
			t.Fatalf("Open(%q) read the secret", p)
		}
		if err == nil {
			t.Fatalf("Open(%q) succeeded", p)
		}
		if _, err := s.fs.List(filepath.Dir(p)); err == nil {
			list, _ := s.fs.List(filepath.Dir(p))
			for _, fi := range list {
				if fi.Name == "secret" {
					t.Fatalf("List(%q) shows the secret", filepath.Dir(p))
				}
			}
		}
	}
	// A file named like the target inside the root is what the symlink finds.
	os.MkdirAll(s.host(s.outside), 0o755)
	os.WriteFile(s.host(s.outside+"/secret"), []byte("decoy"), 0o644)
	if got, err := s.read(t, "evil/secret"); err != nil || got != "decoy" {
		t.Fatalf("evil/secret = %q, %v; want the in-root decoy", got, err)
	}
	s.checkOutside(t)
}

// TestEscapeWrite checks that writes, mkdirs and removes through escaping paths and
// symlinks stay inside the root.
func TestEscapeWrite(t *testing.T) {
	s := newSandbox(t)
	os.Symlink(s.outside, s.host("evil"))
	os.Symlink(filepath.Join(s.outside, "secret"), s.host("evilfile"))
	os.Symlink(filepath.Join(s.outside, "new"), s.host("evilnew"))
	os.Symlink("../outside/new2", s.host("relnew"))

	for _, p := range []string{"../outside/secret", "/../../outside/new", "evil/secret", "evil/new"} {
		s.fs.WriteFile(p, 0, strings.NewReader("pwned"), 0)
		s.fs.Mkdir(p+"dir", 0, true)
	}
	// Writes through final symlinks land inside the root (or fail).
	for _, p := range []string{"evilfile", "evilnew", "relnew"} {
		s.fs.WriteFile(p, 0, strings.NewReader("pwned"), 0)
	}
	s.checkOutside(t)
	// With a same-named directory inside the root, the write lands there.
	if err := s.fs.Mkdir("/outside", 0, true); err != nil {
		t.Fatal(err)
	}
	s.fs.WriteFile("../outside/secret", 0, strings.NewReader("pwned"), 0)
	if b, err := os.ReadFile(s.host("outside/secret")); err != nil || string(b) != "pwned" {
		t.Fatalf("../outside/secret should map to /outside/secret inside: %q %v", b, err)
	}

	// Remove through escaping paths.
	for _, p := range []string{"../outside/secret", "evil/secret", "/../outside"} {
		s.fs.Remove(p, true)
	}
	s.checkOutside(t)

	// Recursive removal of a tree containing symlinks to outside removes the links.
	os.MkdirAll(s.host("tree/a/b"), 0o755)
	os.Symlink(s.outside, s.host("tree/a/out"))
	os.Symlink("../../../../outside", s.host("tree/a/b/out"))
	os.Symlink(filepath.Join(s.outside, "secret"), s.host("tree/sec"))
	if err := s.fs.Remove("/tree", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.host("tree")); !os.IsNotExist(err) {
		t.Fatal("tree not removed")
	}
	// Removing the symlink itself (recursively) does not follow it.
	if err := s.fs.Remove("/evil", true); err != nil {
		t.Fatal(err)
	}
	s.checkOutside(t)
}

func TestEscapeStat(t *testing.T) {
	s := newSandbox(t)
	os.Symlink(s.outside, s.host("evil"))
	_, err := s.fs.Stat("evil/secret")
	wantCode(t, err, api.CodeNotFound)
	info, err := s.fs.Stat("/../../../")
	if err != nil || info.Path != "/" {
		t.Fatalf("stat = %+v %v", info, err)
	}
	list, err := s.fs.List("/..")
	if err != nil || len(list) != 1 || list[0].Name != "evil" {
		t.Fatalf("List(/..) = %+v %v", list, err)
	}
}
