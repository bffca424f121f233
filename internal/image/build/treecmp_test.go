package build_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fileNode is what the conformance suite compares of one path of a file tree.
type fileNode struct {
	Type   string // file, dir, symlink, char, block, fifo, socket
	Mode   string // permission bits with setuid/setgid/sticky, octal
	UID    uint32
	GID    uint32
	Link   string // a symlink's target
	Size   int64  // a regular file's
	SHA256 string // a regular file's contents
	Dev    string // a device's major:minor
	// HardLink is the first path (in walk order) of the regular file this one
	// is a hard link of; "" for the first or only one.
	HardLink string
	Xattrs   map[string]string
}

// fileTree is a tree by path ("/etc/passwd").
type fileTree map[string]fileNode

// ignoredXattr says which extended attributes are not the image's: SELinux
// and capability labels a builder or host may add (security.*), and
// overlayfs's own (trusted.overlay.*, the layer format's whiteouts).
func ignoredXattr(name string) bool {
	return strings.HasPrefix(name, "security.") || strings.HasPrefix(name, "trusted.overlay.")
}

// walkTree reads the tree under root from the host, never following
// symlinks; it does not descend into mount points below root.
func walkTree(root string) (fileTree, error) {
	var rootSt unix.Stat_t
	if err := unix.Lstat(root, &rootSt); err != nil {
		return nil, err
	}
	out := fileTree{}
	inodes := map[[2]uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := fileNode{Mode: fmt.Sprintf("%04o", st.Mode&0o7777), UID: st.Uid, GID: st.Gid}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n.Type = "dir"
		case unix.S_IFREG:
			n.Type, n.Size = "file", st.Size
			if n.SHA256, err = fileSHA(p); err != nil {
				return err
			}
			if st.Nlink > 1 {
				id := [2]uint64{st.Dev, st.Ino}
				if first, ok := inodes[id]; ok {
					n.HardLink = first
				} else {
					inodes[id] = rel
				}
			}
		case unix.S_IFLNK:
			n.Type = "symlink"
			if n.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case unix.S_IFCHR, unix.S_IFBLK:
			n.Type = "char"
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				n.Type = "block"
			}
			n.Dev = fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		case unix.S_IFIFO:
			n.Type = "fifo"
		default:
			n.Type = "socket"
		}
		if n.Xattrs, err = xattrs(p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out[rel] = n
		if n.Type == "dir" && p != root && st.Dev != rootSt.Dev {
			return filepath.SkipDir // a mount point
		}
		return nil
	})
	return out, err
}

func fileSHA(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// xattrs returns p's extended attributes but the ignored ones (nil: none).
func xattrs(p string) (map[string]string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err == unix.ENOTSUP {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out map[string]string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" || ignoredXattr(name) {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(p, name, v)
		if err == unix.ENODATA || err == syscall.EPERM {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getxattr %s: %w", name, err)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(v[:m])
	}
	return out, nil
}

// exclusion leaves a path (and, with tree set, everything under it) out of a
// comparison, for a reason; with field set, only that field of it.
type exclusion struct {
	path   string
	tree   bool
	field  string
	reason string
}

func (e exclusion) matches(p string) bool {
	return p == e.path || e.tree && strings.HasPrefix(p, strings.TrimSuffix(e.path, "/")+"/")
}

// compareTrees returns the differences between want (the reference builder's
// tree) and got (dsec's), one readable line each, sorted by path; paths an
// exclusion matches are left out on both sides.
func compareTrees(want, got fileTree, excl []exclusion) []string {
	skipField := func(p, field string) bool {
		return slices.ContainsFunc(excl, func(e exclusion) bool { return e.field == field && e.matches(p) })
	}
	skip := func(p string) bool { return skipField(p, "") }
	paths := slices.Sorted(maps.Keys(want))
	for p := range got {
		if _, ok := want[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var diffs []string
	for _, p := range paths {
		if skip(p) {
			continue
		}
		w, inWant := want[p]
		g, inGot := got[p]
		switch {
		case !inGot:
			diffs = append(diffs, fmt.Sprintf("- %s %s (only in the reference build)", p, describe(w)))
			continue
		case !inWant:
			diffs = append(diffs, fmt.Sprintf("+ %s %s (only in dsec's build)", p, describe(g)))
			continue
		}
		var d []string
		field := func(name string, a, b any) {
			if fmt.Sprint(a) != fmt.Sprint(b) && !skipField(p, name) {
				d = append(d, fmt.Sprintf("%s %v != %v", name, a, b))
			}
		}
		field("type", w.Type, g.Type)
		field("mode", w.Mode, g.Mode)
		field("uid", w.UID, g.UID)
		field("gid", w.GID, g.GID)
		field("link", w.Link, g.Link)
		field("size", w.Size, g.Size)
		field("sha256", w.SHA256, g.SHA256)
		field("dev", w.Dev, g.Dev)
		field("hardlink-of", w.HardLink, g.HardLink)
		field("xattrs", sortedXattrs(w.Xattrs), sortedXattrs(g.Xattrs))
		if len(d) > 0 {
			diffs = append(diffs, fmt.Sprintf("~ %s: %s (reference != dsec)", p, strings.Join(d, "; ")))
		}
	}
	return diffs
}

func sortedXattrs(m map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, fmt.Sprintf("%s=%q", k, m[k]))
	}
	return "[" + strings.Join(kv, " ") + "]"
}

func describe(n fileNode) string {
	s := fmt.Sprintf("%s %s %d:%d", n.Type, n.Mode, n.UID, n.GID)
	if n.Link != "" {
		s += " -> " + n.Link
	}
	return s
}

// TestCompareTreesCatchesDifferences: two identical trees compare equal; a
// planted mode change, owner change, content change, extra file, changed
// link target, lost hard link and lost xattr each show up as a line naming
// the path; an excluded path does not.
func TestCompareTreesCatchesDifferences(t *testing.T) {
	mk := func(dir string) {
		for _, d := range []string{"etc", "bin", "run"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeFiles(t, dir, map[string]string{"etc/conf": "a=1\n", "bin/tool.sh": "#!/bin/sh\n", "etc/data": "d\n", "run/x": "x"})
		if err := os.Link(filepath.Join(dir, "etc/data"), filepath.Join(dir, "etc/data-hard")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../etc/conf", filepath.Join(dir, "bin/conf")); err != nil {
			t.Fatal(err)
		}
		if err := unix.Lsetxattr(filepath.Join(dir, "etc/conf"), "user.tag", []byte("v"), 0); err != nil {
			t.Skipf("no user xattrs on %s: %v", dir, err)
		}
	}
	a, b := t.TempDir(), t.TempDir()
	mk(a)
	mk(b)
	walk := func(dir string) fileTree {
		tr, err := walkTree(dir)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	if d := compareTrees(walk(a), walk(b), nil); len(d) != 0 {
		t.Fatalf("identical trees differ:\n%s", strings.Join(d, "\n"))
	}
	if got := walk(a)["/etc/data-hard"].HardLink; got != "/etc/data" {
		t.Fatalf("hard link not recorded: %q", got)
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(unix.Chmod(filepath.Join(b, "bin/tool.sh"), 0o4755))
	must(os.Lchown(filepath.Join(b, "etc/conf"), 1000, 0))
	must(os.WriteFile(filepath.Join(b, "etc/data"), []byte("D\n"), 0o644))
	must(os.WriteFile(filepath.Join(b, "etc/extra"), nil, 0o644))
	must(os.Remove(filepath.Join(b, "bin/conf")))
	must(os.Symlink("/etc/conf", filepath.Join(b, "bin/conf")))
	must(os.Remove(filepath.Join(b, "etc/data-hard")))
	must(os.WriteFile(filepath.Join(b, "etc/data-hard"), []byte("D\n"), 0o644))
	must(unix.Lremovexattr(filepath.Join(a, "etc/conf"), "user.tag"))
	must(unix.Lsetxattr(filepath.Join(a, "etc/conf"), "user.tag", []byte("w"), 0))
	must(os.WriteFile(filepath.Join(b, "run/x"), []byte("changed"), 0o600))

	diffs := compareTrees(walk(a), walk(b), []exclusion{{path: "/run", tree: true, reason: "test"},
		{path: "/bin/tool.sh", field: "uid", reason: "test: another field than the one that differs"}})
	t.Logf("planted differences:\n%s", strings.Join(diffs, "\n"))
	want := []string{
		"~ /bin/conf: link ../etc/conf != /etc/conf (",
		"~ /bin/tool.sh: mode 0755 != 4755",
		`~ /etc/conf: uid 0 != 1000; xattrs [user.tag="w"] != [user.tag="v"]`,
		"~ /etc/data: sha256 ",
		"~ /etc/data-hard: sha256 ",
		"+ /etc/extra file 0644 0:0 (only in dsec's build)",
	}
	if len(diffs) != len(want) {
		t.Fatalf("%d differences, want %d", len(diffs), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(diffs[i], w) {
			t.Errorf("difference %d = %q, want it to start with %q", i, diffs[i], w)
		}
	}
	if !strings.Contains(diffs[4], "hardlink-of /etc/data != ") {
		t.Errorf("the lost hard link is not reported: %q", diffs[4])
	}
}
