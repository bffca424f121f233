package mock_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
)

// busyboxRoot is the rootfs of the busybox image `make setup` builds (a static
// busybox, one symlink per applet).
const busyboxRoot = "/var/lib/dsec/images/busybox/rootfs"

// TestMockRooted: in rooted mode (as root) the mock claims Credentials, and a
// process runs chrooted into its sandbox with the credentials and working
// directory it asks for, so in-sandbox paths (a chown's, pwd's) are the
// sandbox's and not the host's.
func TestMockRooted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("rooted mode needs root")
	}
	dir := t.TempDir()
	d, err := mock.New(mock.Config{Host: mock.NewHost(), StateDir: dir, Chroot: true})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Capabilities().Credentials {
		t.Fatal("rooted mode must claim Credentials")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, driver.Spec{ID: "sb1", Layers: []driver.Layer{{Kind: driver.LayerDir, Path: busyboxRoot}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Destroy(context.Background()) })
	root := filepath.Join(dir, "sb1")
	if err := os.WriteFile(filepath.Join(root, "tmp", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(uid, gid int, cwd, script string) drivertest.Result {
		t.Helper()
		r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=" + drivertest.DefaultPath},
			Cwd: cwd, UID: uid, GID: gid, Groups: []int{gid}}, "")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := run(0, 0, "/tmp", "chown 1000:1001 /tmp/f && pwd"); r.Stdout != "/tmp\n" || r.Exit.Code != 0 {
		t.Fatalf("chown as root: %+v", r)
	}
	if st, err := os.Stat(filepath.Join(root, "tmp", "f")); err != nil || st.Sys() == nil {
		t.Fatal(err)
	} else if uid, gid := owner(st); uid != 1000 || gid != 1001 {
		t.Fatalf("the sandbox's /tmp/f is owned by %d:%d, want 1000:1001", uid, gid)
	}
	if r := run(1000, 1001, "/", "id -u; id -g; pwd; echo no >/root/x"); r.Stdout != "1000\n1001\n/\n" || r.Exit.Code == 0 {
		t.Fatalf("as 1000:1001: %+v (must not write root's home)", r)
	}
	if r := run(0, 0, "/", "ls /var/lib/dsec"); r.Exit.Code == 0 {
		t.Fatalf("the host's files are visible in the chroot: %+v", r)
	}
}

func owner(st os.FileInfo) (uid, gid int) {
	s := st.Sys().(*syscall.Stat_t)
	return int(s.Uid), int(s.Gid)
}
