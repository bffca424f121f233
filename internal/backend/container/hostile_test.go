package container_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestSnapshotHostileTree: fork and commit copy the writable layer, a tree the
// sandbox controls, by treeCopy's rule. A sandbox with a 64 MiB disk limit
// makes a 1 TiB sparse file: the snapshot is refused (resource_exhausted) and
// writes nothing to the node. Without it, the copy of a tree with a sparse
// file within the budget, symlinks pointing at host paths, a FIFO, a socket
// and a farm of hard links keeps holes as holes, copies links as links
// (nothing of the host is read), recreates the FIFO without opening it, leaves
// the socket out, and keeps the hard links as one inode.
func TestSnapshotHostileTree(t *testing.T) {
	lower := requireImage(t, "busybox")
	cfg := testConfig(t)
	d, err := container.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("ht"), Layers: lower, Memory: 128 << 20, Disk: 64 << 20, PidsMax: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	sh := func(script string) {
		t.Helper()
		r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: []string{"sh", "-c", script}, Env: []string{"PATH=/bin:/usr/bin"}, Cwd: "/"}, "")
		if err != nil || r.Exit.Code != 0 {
			t.Fatalf("%s: %+v %v", script, r, err)
		}
	}
	snap := inst.(driver.Snapshotter)
	out := t.TempDir()

	sh(`truncate -s 1099511627776 /huge`)
	dir := filepath.Join(out, "refused")
	_, err = snap.SnapshotRW(ctx, dir, nil)
	if errdefs.CodeOf(err) != api.CodeResourceExhausted {
		t.Fatalf("snapshot with a 1 TiB sparse file in a 64 MiB layer: %v, want resource_exhausted", err)
	}
	if !strings.Contains(err.Error(), "/huge") {
		t.Errorf("the refusal does not name the file: %v", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused snapshot left %s (%v)", dir, err)
	}
	// dsec cp out of the sandbox (a tar stream, where holes are zeros) too.
	fs, err := inst.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tarred countingDiscard
	if err := fs.WriteTar(ctx, "/", &tarred); errdefs.CodeOf(err) != api.CodeResourceExhausted {
		t.Errorf("tar of the sandbox with a 1 TiB sparse file: %v, want resource_exhausted", err)
	}
	if tarred > 256<<20 {
		t.Errorf("%d bytes streamed before the refusal", tarred)
	}

	sh(`rm /huge
truncate -s 33554432 /sparse && echo end >> /sparse
ln -s /etc/shadow /abs-link && ln -s ../../../../../etc/passwd /rel-link
mkfifo /fifo
mkdir /farm && echo data > /farm/f0 && i=0 && while [ $i -lt 500 ]; do ln /farm/f0 /farm/l$i; i=$((i+1)); done`)
	// A socket file, bound from the host through the sandbox's root.
	root := filepath.Join("/proc", pidOf(t, inst), "root")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(root, "sock")}); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(out, "copy")
	st, err := snap.SnapshotRW(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var s unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "sparse"), &s); err != nil || s.Size != 32<<20+4 || s.Blocks*512 > 1<<20 {
		t.Errorf("sparse file copied as size %d with %d bytes allocated (%v): want 32 MiB + 4 with its hole kept", s.Size, s.Blocks*512, err)
	}
	for name, want := range map[string]string{"abs-link": "/etc/shadow", "rel-link": "../../../../../etc/passwd"} {
		if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != want {
			t.Errorf("%s: %q %v, want a symlink to %q", name, got, err, want)
		}
	}
	if err := unix.Lstat(filepath.Join(dir, "fifo"), &s); err != nil || s.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("fifo not recreated as a FIFO: %o %v", s.Mode, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sock")); !os.IsNotExist(err) {
		t.Errorf("the socket was copied: %v", err)
	}
	var f0 unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "farm", "f0"), &f0); err != nil || f0.Nlink != 501 {
		t.Errorf("hard link farm: f0 has %d links (%v), want 501", f0.Nlink, err)
	}
	if err := unix.Lstat(filepath.Join(dir, "farm", "l499"), &s); err != nil || s.Ino != f0.Ino {
		t.Errorf("l499 is not a hard link of f0: %v", err)
	}
	if st.Excluded < 1 {
		t.Errorf("stats %+v: the socket is not counted as left out", st)
	}
}

type countingDiscard int64

func (c *countingDiscard) Write(p []byte) (int, error) {
	*c += countingDiscard(len(p))
	return len(p), nil
}

// pidOf is the sandbox init's host pid (its /proc/PID/root is the sandbox's /).
func pidOf(t *testing.T, inst driver.Instance) string {
	t.Helper()
	p, ok := inst.(interface{ PID() int })
	if !ok {
		t.Skip("the instance does not report its init's pid")
	}
	return strconv.Itoa(p.PID())
}
