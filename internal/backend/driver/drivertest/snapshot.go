package drivertest

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
)

// testSnapshot: a driver claiming Fork or Commit hands out Snapshotters whose
// copy of the writable layer is in overlayfs's format (new files, hard links,
// symlinks, a whiteout for a deleted lower file, an opaque replaced
// directory), leaves excluded paths out, and leaves the sandbox running.
func (s *suite) testSnapshot(t *testing.T) {
	_, inst, _ := s.startNew(t, nil)
	snap, ok := inst.(driver.Snapshotter)
	if claims := s.caps.Fork || s.caps.Commit; ok != claims {
		t.Fatalf("Capabilities() Fork/Commit = %v, but the instance implements driver.Snapshotter: %v", claims, ok)
	}
	if !ok {
		t.Skip("the driver claims neither Fork nor Commit")
	}
	mustSh(t, inst, `echo a > /snapfile && ln /snapfile /snaplink && ln -s snapfile /snapsym &&
		rm /bin/ls && rm -rf /etc && mkdir /etc && echo e > /etc/only &&
		mkdir -p /tmp/cache && echo c > /tmp/cache/x`)
	dir := filepath.Join(t.TempDir(), "copy")
	st, err := snap.SnapshotRW(ctxT(t), dir, []string{"/tmp"})
	if err != nil {
		t.Fatalf("SnapshotRW: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "snapfile")); err != nil || string(b) != "a\n" {
		t.Errorf("snapfile in the copy: %q %v", b, err)
	}
	var a, l unix.Stat_t
	if unix.Lstat(filepath.Join(dir, "snapfile"), &a) != nil || unix.Lstat(filepath.Join(dir, "snaplink"), &l) != nil || a.Ino != l.Ino {
		t.Error("hard link not kept")
	}
	if target, err := os.Readlink(filepath.Join(dir, "snapsym")); err != nil || target != "snapfile" {
		t.Errorf("symlink: %q %v", target, err)
	}
	whiteouts := 0
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		var s unix.Stat_t
		if err == nil && e.Type()&fs.ModeCharDevice != 0 && unix.Lstat(p, &s) == nil && s.Rdev == 0 {
			whiteouts++
		}
		return nil
	})
	if whiteouts < 1 || st.Whiteouts != whiteouts {
		t.Errorf("whiteouts: %d in the copy, %d reported", whiteouts, st.Whiteouts)
	}
	v := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(dir, "etc"), "trusted.overlay.opaque", v); err != nil || string(v[:n]) != "y" || st.Opaque < 1 {
		t.Errorf("replaced /etc not opaque in the copy: %q %v (reported %d)", v[:max(n, 0)], err, st.Opaque)
	}
	if _, err := os.Lstat(filepath.Join(dir, "tmp")); !os.IsNotExist(err) || st.Excluded < 1 {
		t.Errorf("excluded /tmp in the copy: %v (excluded %d)", err, st.Excluded)
	}
	if out := mustSh(t, inst, "cat /etc/only"); out != "e\n" {
		t.Errorf("sandbox after the snapshot: %q", out)
	}
}
