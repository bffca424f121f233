package container

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// isMountPoint reports whether dir is on another file system than its parent.
func isMountPoint(dir string) bool {
	var st, parent unix.Stat_t
	return unix.Stat(dir, &st) == nil && unix.Stat(filepath.Dir(dir), &parent) == nil && st.Dev != parent.Dev
}

// TestRunTmpfsLeftByAKilledDriver: a driver killed with sandboxes gone leaves
// its run dir tmpfs mounted, holding its copy of the init (here one of another
// build); the next driver on the same state dir unmounts it at Close, so
// nothing stays mounted under /run/dsec.
func TestRunTmpfsLeftByAKilledDriver(t *testing.T) {
	if onMemoryFS("/run") {
		t.Skip("/run is a memory file system here: the driver mounts no tmpfs of its own")
	}
	state := t.TempDir()
	sum := sha256.Sum256([]byte(state))
	run := filepath.Join("/run/dsec", hex.EncodeToString(sum[:4]))
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	if mounted, err := mountRunTmpfs(run); err != nil || !mounted {
		t.Fatalf("mount the earlier driver's tmpfs: %v %v", mounted, err)
	}
	t.Cleanup(func() {
		if isMountPoint(run) {
			_ = unix.Unmount(run, unix.MNT_DETACH)
		}
		_ = os.Remove(run)
	})
	if err := os.WriteFile(filepath.Join(run, "dsec-init-000000000000"), []byte("x"), 0o500); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if d.cfg.RunDir != run {
		t.Fatalf("run dir %s, want %s", d.cfg.RunDir, run)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if isMountPoint(run) {
		t.Fatalf("%s is still mounted after Close", run)
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Close: %v", run, err)
	}
}
