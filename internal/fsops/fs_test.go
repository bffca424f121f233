package fsops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

func TestWriteReadRoundTrip(t *testing.T) {
	s := newSandbox(t)
	info, err := s.fs.WriteFile("/hello.txt", 0o600, strings.NewReader("hi there"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != "/hello.txt" || info.Name != "hello.txt" || info.Size != 8 || info.Mode != 0o600 || info.Type != "file" {
		t.Fatalf("info = %+v", info)
	}
	got, err := s.read(t, "hello.txt") // relative means relative to the root
	if err != nil || got != "hi there" {
		t.Fatalf("read = %q, %v", got, err)
	}
	rc, rinfo, err := s.fs.Open("/./x/../hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if rinfo.Path != "/hello.txt" || rinfo.Size != 8 {
		t.Fatalf("open info = %+v", rinfo)
	}
	// Default mode, overwrite keeps the owner.
	if err := os.Chown(s.host("hello.txt"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	info, err = s.fs.WriteFile("/hello.txt", 0, strings.NewReader("new"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode != 0o644 || info.UID != 1234 || info.GID != 5678 || info.Size != 3 {
		t.Fatalf("overwrite info = %+v", info)
	}
	// Setuid given the os way and the unix way.
	for _, m := range []os.FileMode{0o755 | os.ModeSetuid, 0o4755} {
		info, err = s.fs.WriteFile("/suid", m, strings.NewReader(""), 0)
		if err != nil || info.Mode != 0o4755 {
			t.Fatalf("mode %v: %+v %v", m, info, err)
		}
	}
	// No temp files left behind.
	ents, _ := os.ReadDir(s.root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".dsec") {
			t.Fatalf("temp file left: %s", e.Name())
		}
	}
}

func TestWriteFileErrors(t *testing.T) {
	s := newSandbox(t)
	_, err := s.fs.WriteFile("/missing/f", 0, strings.NewReader("x"), 0)
	wantCode(t, err, api.CodeNotFound)
	_, err = s.fs.WriteFile("/", 0, strings.NewReader("x"), 0)
	wantCode(t, err, api.CodeInvalidArgument)
	if err := s.fs.Mkdir("/d", 0, false); err != nil {
		t.Fatal(err)
	}
	_, err = s.fs.WriteFile("/d", 0, strings.NewReader("x"), 0)
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = s.fs.WriteFile("/a\x00b", 0, strings.NewReader("x"), 0)
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = s.fs.WriteFile("", 0, strings.NewReader("x"), 0)
	wantCode(t, err, api.CodeInvalidArgument)
	// A failing reader leaves the old content and no temp file.
	s.write(t, "/f", "old")
	_, err = s.fs.WriteFile("/f", 0, iotest.TimeoutReader(strings.NewReader("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")), 0)
	if err == nil {
		t.Fatal("want error from failing reader")
	}
	if got, _ := s.read(t, "/f"); got != "old" {
		t.Fatalf("content = %q", got)
	}
}

func TestWriteFileMaxBytes(t *testing.T) {
	s := newSandbox(t)
	s.write(t, "/f", "previous")
	_, err := s.fs.WriteFile("/f", 0, strings.NewReader("0123456789A"), 10)
	wantCode(t, err, api.CodePayloadTooLarge)
	if got, _ := s.read(t, "/f"); got != "previous" {
		t.Fatalf("content = %q", got)
	}
	ents, _ := os.ReadDir(s.root)
	if len(ents) != 1 {
		t.Fatalf("root holds %d entries, want 1", len(ents))
	}
	// Exactly maxBytes is fine.
	if _, err := s.fs.WriteFile("/f", 0, strings.NewReader("0123456789"), 10); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.read(t, "/f"); got != "0123456789" {
		t.Fatalf("content = %q", got)
	}
}

func TestWriteFileThroughSymlink(t *testing.T) {
	s := newSandbox(t)
	if err := s.fs.Mkdir("/etc/real", 0, true); err != nil {
		t.Fatal(err)
	}
	// Relative, absolute and chained symlinks are followed inside the root.
	os.Symlink("real/conf", s.host("etc/rel"))
	os.Symlink("/etc/real/conf2", s.host("etc/abs"))
	os.Symlink("../etc/rel", s.host("etc/chain"))
	s.write(t, "/etc/rel", "one")
	s.write(t, "/etc/abs", "two")
	if b, _ := os.ReadFile(s.host("etc/real/conf")); string(b) != "one" {
		t.Fatalf("rel: %q", b)
	}
	if b, _ := os.ReadFile(s.host("etc/real/conf2")); string(b) != "two" {
		t.Fatalf("abs: %q", b)
	}
	s.write(t, "/etc/chain", "three")
	if b, _ := os.ReadFile(s.host("etc/real/conf")); string(b) != "three" {
		t.Fatalf("chain: %q", b)
	}
	if fi, err := os.Lstat(s.host("etc/rel")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("symlink was replaced")
	}
	// Loops are refused.
	os.Symlink("loop2", s.host("loop1"))
	os.Symlink("loop1", s.host("loop2"))
	_, err := s.fs.WriteFile("/loop1", 0, strings.NewReader("x"), 0)
	wantCode(t, err, api.CodeInvalidArgument)
	// A symlink to a directory.
	os.Symlink("/etc/", s.host("todir"))
	_, err = s.fs.WriteFile("/todir", 0, strings.NewReader("x"), 0)
	wantCode(t, err, api.CodeInvalidArgument)
}

func TestMkdir(t *testing.T) {
	s := newSandbox(t)
	if err := s.fs.Mkdir("/a", 0o700, false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.fs.Mkdir("/a", 0, false), api.CodeAlreadyExists)
	wantCode(t, s.fs.Mkdir("/x/y", 0, false), api.CodeNotFound)
	if err := s.fs.Mkdir("/a/b/c/d", 0o750, true); err != nil {
		t.Fatal(err)
	}
	if err := s.fs.Mkdir("/a/b/c/d", 0o750, true); err != nil {
		t.Fatalf("mkdir -p of existing dir: %v", err)
	}
	if err := s.fs.Mkdir("/", 0, true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.fs.Mkdir("/", 0, false), api.CodeAlreadyExists)
	for p, want := range map[string]uint32{"/a": 0o700, "/a/b": 0o755, "/a/b/c/d": 0o750} {
		info, err := s.fs.Stat(p)
		if err != nil || info.Mode != want || info.Type != "dir" {
			t.Fatalf("%s: %+v %v", p, info, err)
		}
	}
	s.write(t, "/file", "x")
	wantCode(t, s.fs.Mkdir("/file", 0, true), api.CodeAlreadyExists)
	wantCode(t, s.fs.Mkdir("/file", 0, false), api.CodeAlreadyExists)
	wantCode(t, s.fs.Mkdir("/file/sub", 0, true), api.CodeInvalidArgument)
	// Through a symlink inside the root.
	os.Symlink("/a/b", s.host("lnk"))
	if err := s.fs.Mkdir("/lnk/new/deeper", 0, true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.host("a/b/new/deeper")); err != nil || !fi.IsDir() {
		t.Fatal("mkdir through symlink did not land in the target")
	}
}

func TestListAndStat(t *testing.T) {
	s := newSandbox(t)
	s.fs.Mkdir("/etc", 0, false)
	s.write(t, "/etc/passwd", "root:x:0:0::/root:/bin/sh\n")
	s.write(t, "/etc/b", "")
	s.fs.Mkdir("/etc/a", 0, false)
	os.Symlink("/nowhere", s.host("etc/link"))
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(s.host("etc/passwd"), mtime, mtime)

	list, err := s.fs.List("/etc/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fi := range list {
		names = append(names, fi.Name)
	}
	if strings.Join(names, ",") != "a,b,link,passwd" {
		t.Fatalf("names = %v", names)
	}
	if list[0].Type != "dir" || list[2].Type != "symlink" || list[2].Link != "/nowhere" || list[3].Path != "/etc/passwd" {
		t.Fatalf("list = %+v", list)
	}
	if !list[3].ModTime.Equal(mtime) || list[3].Size != 26 {
		t.Fatalf("passwd = %+v", list[3])
	}
	info, err := s.fs.Stat("/etc/link")
	if err != nil || info.Type != "symlink" || info.Link != "/nowhere" {
		t.Fatalf("stat link = %+v %v", info, err)
	}
	info, err = s.fs.Stat("/")
	if err != nil || info.Type != "dir" || info.Path != "/" {
		t.Fatalf("stat / = %+v %v", info, err)
	}
	_, err = s.fs.Stat("/nope")
	wantCode(t, err, api.CodeNotFound)
	_, err = s.fs.List("/etc/passwd")
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = s.fs.List("/nope")
	wantCode(t, err, api.CodeNotFound)
	if list, err := s.fs.List("/"); err != nil || len(list) != 1 || list[0].Path != "/etc" {
		t.Fatalf("list / = %+v %v", list, err)
	}
}

func TestOpenErrors(t *testing.T) {
	s := newSandbox(t)
	s.fs.Mkdir("/d", 0, false)
	_, _, err := s.fs.Open("/d")
	wantCode(t, err, api.CodeInvalidArgument)
	if !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("err = %v", err)
	}
	_, _, err = s.fs.Open("/missing")
	wantCode(t, err, api.CodeNotFound)
	if err := unix.Mkfifo(s.host("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.fs.Open("/fifo") // must not hang
	wantCode(t, err, api.CodeInvalidArgument)
	os.Symlink("d", s.host("dl"))
	_, _, err = s.fs.Open("/dl")
	wantCode(t, err, api.CodeInvalidArgument)
	if strings.Contains(err.Error(), s.root) {
		t.Fatalf("error leaks host path: %v", err)
	}
}

func TestRemove(t *testing.T) {
	s := newSandbox(t)
	wantCode(t, s.fs.Remove("/", true), api.CodeInvalidArgument)
	wantCode(t, s.fs.Remove("/../..", true), api.CodeInvalidArgument)
	wantCode(t, s.fs.Remove("/nope", false), api.CodeNotFound)
	s.write(t, "/f", "x")
	if err := s.fs.Remove("/f", false); err != nil {
		t.Fatal(err)
	}
	s.fs.Mkdir("/d/e/f", 0, true)
	s.write(t, "/d/e/f/g", "x")
	wantCode(t, s.fs.Remove("/d", false), api.CodeConflict)
	if err := s.fs.Remove("/d/e/f/g", false); err != nil {
		t.Fatal(err)
	}
	if err := s.fs.Remove("/d/e/f", false); err != nil {
		t.Fatal(err)
	}
	if err := s.fs.Remove("/d", true); err != nil {
		t.Fatal(err)
	}
	// A symlink to a directory is removed itself, even recursively.
	s.fs.Mkdir("/keep", 0, false)
	s.write(t, "/keep/file", "x")
	os.Symlink("/keep", s.host("kl"))
	if err := s.fs.Remove("/kl", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.host("keep/file")); err != nil {
		t.Fatal("symlink target was removed")
	}
	ents, _ := os.ReadDir(s.root)
	if len(ents) != 1 {
		t.Fatalf("root holds %d entries", len(ents))
	}
}

func TestRemoveLargeTree(t *testing.T) {
	s := newSandbox(t)
	for i := range 50 {
		d := filepath.Join(s.root, "t", strings.Repeat("x/", i%7), string(rune('a'+i%26)))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o400)
		os.Chmod(d, 0o500)
	}
	if err := s.fs.Remove("/t", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.host("t")); !os.IsNotExist(err) {
		t.Fatal("tree still there")
	}
}
