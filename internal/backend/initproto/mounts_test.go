package initproto

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/mountinfo"
	"github.com/dsec-dev/dsec/internal/testwait"
	"golang.org/x/sys/unix"
)

// sandboxMounts returns the sandbox's own view of its mounts, by mount point.
func sandboxMounts(t *testing.T, s *sandbox) map[string]mountinfo.Mount {
	t.Helper()
	r := s.sh(t, "cat /proc/self/mountinfo")
	if r.exit.Status != 0 {
		t.Fatalf("mountinfo: %v %q", r.exit.Status, r.stderr)
	}
	ms, err := mountinfo.Parse(strings.NewReader(r.stdout))
	if err != nil {
		t.Fatal(err)
	}
	byPoint := map[string]mountinfo.Mount{}
	for _, m := range ms {
		byPoint[m.Point] = m // the top mount wins
	}
	if len(byPoint) == 0 {
		t.Fatalf("no mounts in\n%s", r.stdout)
	}
	return byPoint
}

// hostDev returns the major:minor of the top mount on dir in the host's view.
func hostDev(t *testing.T, dir string) string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mountinfo.Top(real)
	if err != nil || m == nil {
		t.Fatalf("no mount on %s: %v", real, err)
	}
	return m.Dev
}

// TestSuperblocks checks that a sandbox makes only four superblocks of its
// own (overlay, writable-layer tmpfs, proc, devpts): /dev, /dev/shm and the
// masked directories live in the tmpfs, /sys is the shared sysfs.
func TestSuperblocks(t *testing.T) {
	requireRoot(t)
	sysfs := sharedSysfs(t)
	sysDev := hostDev(t, sysfs)
	initPath, lower := installInit(t), makeLower(t)
	var sysDevs []string
	for i := 0; i < 2; i++ {
		cfg := sandboxConfig(t, initPath, lower, t.TempDir(), shortDir(t))
		cfg.SysfsPath = sysfs
		s := newSandboxFrom(t, cfg)
		ms := sandboxMounts(t, s)
		want := map[string]string{"/": "overlay", "/proc": "proc", "/dev": "tmpfs",
			"/dev/pts": "devpts", "/dev/shm": "tmpfs", "/sys": "sysfs"}
		for point, fstype := range want {
			if ms[point].FSType != fstype {
				t.Fatalf("%s: %+v, want %s", point, ms[point], fstype)
			}
		}
		rw := ms["/dev"].Dev
		own := map[string]bool{}
		for point, m := range ms {
			if m.Dev != sysDev {
				own[m.Dev] = true
			}
			switch {
			case point == "/dev/shm":
				if m.Dev != rw || !mountinfo.HasOpt(m.Opts, "nosuid") || !mountinfo.HasOpt(m.Opts, "nodev") || !mountinfo.HasOpt(m.Opts, "rw") {
					t.Errorf("/dev/shm: %+v", m)
				}
			case point == "/dev":
				if mountinfo.HasOpt(m.Opts, "nodev") || !mountinfo.HasOpt(m.Opts, "nosuid") {
					t.Errorf("/dev: %+v", m)
				}
			case point == "/sys":
				if !mountinfo.HasOpt(m.Opts, "ro") || !mountinfo.HasOpt(m.Opts, "nosuid") || !mountinfo.HasOpt(m.Opts, "nodev") || !mountinfo.HasOpt(m.Opts, "noexec") {
					t.Errorf("/sys not read-only: %+v", m)
				}
			case point == "/proc/acpi" || point == "/sys/firmware" || point == "/proc/scsi" || point == "/proc/asound":
				if m.Dev != rw || !mountinfo.HasOpt(m.Opts, "ro") {
					t.Errorf("masked dir %s: %+v, want a read-only bind of the tmpfs %s", point, m, rw)
				}
			case point == "/proc/kcore" || point == "/proc/keys":
				if m.Dev != rw { // binds of /dev/null
					t.Errorf("masked file %s: %+v", point, m)
				}
			}
		}
		if _, ok := ms["/sys/firmware"]; !ok {
			if _, err := os.Stat("/sys/firmware"); err == nil {
				t.Errorf("/sys/firmware not masked: %v", ms)
			}
		}
		if len(own) != 4 {
			t.Errorf("sandbox %d has %d superblocks of its own, want 4: %v", i, len(own), ms)
		}
		sysDevs = append(sysDevs, ms["/sys"].Dev)

		r := s.sh(t, `set -e
echo data > /dev/shm/x; test "$(cat /dev/shm/x)" = data
test "$(dd if=/dev/urandom bs=16 count=1 2>/dev/null | wc -c)" = 16
test "$(dd if=/dev/zero bs=8 count=1 2>/dev/null | wc -c)" = 8
echo x > /dev/null; test "$(cat /dev/null | wc -c)" = 0
test -z "$(ls /sys/firmware)"; ! touch /sys/firmware/x 2>/dev/null
! touch /sys/kernel/x 2>/dev/null
! mount -t tmpfs x /tmp 2>/dev/null
! mount -o remount,rw /sys 2>/dev/null
ls /sys/class/net`)
		if r.exit.Status != 0 || r.stdout != "lo\n" {
			t.Fatalf("sandbox %d: %v %q %q", i, r.exit.Status, r.stdout, r.stderr)
		}
	}
	if sysDevs[0] != sysDev || sysDevs[1] != sysDev {
		t.Fatalf("sysfs devices %v, want the shared %s", sysDevs, sysDev)
	}
	// nothing a sandbox mounted below its /sys reached the shared mount
	if host, err := os.ReadDir("/sys/firmware"); err == nil && len(host) > 0 {
		if shared, _ := os.ReadDir(filepath.Join(sysfs, "firmware")); len(shared) == 0 {
			t.Errorf("the shared sysfs shows a masked firmware dir")
		}
	}
}

// newSandboxFrom spawns an init from a prepared config.
func newSandboxFrom(t *testing.T, cfg SpawnConfig) *sandbox {
	t.Helper()
	in, err := Spawn(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &sandbox{tb: t, cfg: cfg, init: in}
	t.Cleanup(s.kill)
	return s
}

// isNsfs reports whether path (e.g. /proc/PID/fd/N) is a namespace file.
func isNsfs(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// TestOwnSysfs: without SysfsPath the init mounts a sysfs of its own.
func TestOwnSysfs(t *testing.T) {
	s := newSandbox(t, func(c *SpawnConfig) { c.SysfsPath = "" })
	ms := sandboxMounts(t, s)
	if m := ms["/sys"]; m.FSType != "sysfs" || !mountinfo.HasOpt(m.Opts, "ro") {
		t.Fatalf("/sys: %+v", m)
	}
	r := s.sh(t, "ls /sys/class/net; ! touch /sys/kernel/x 2>/dev/null")
	if r.exit.Status != 0 || r.stdout != "lo\n" {
		t.Fatalf("own sysfs: %v %q %q", r.exit.Status, r.stdout, r.stderr)
	}
}

// TestSysfsNotSysfs: a SysfsPath that is no sysfs mount is refused.
func TestSysfsNotSysfs(t *testing.T) {
	requireRoot(t)
	cfg := sandboxConfig(t, installInit(t), makeLower(t), t.TempDir(), shortDir(t))
	cfg.SysfsPath = t.TempDir()
	_, err := Spawn(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "not a sysfs") {
		t.Fatalf("spawn with a plain directory as sysfs: %v", err)
	}
	cfg.SysfsPath = "relative"
	if err := cfg.validate(); err == nil {
		t.Fatal("relative sysfs path accepted")
	}
}

// TestMountSharedSysfs covers reuse, replacing a stale mount and unmounting.
func TestMountSharedSysfs(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "sysfs")
	if err := MountSharedSysfs(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { UnmountSharedSysfs(dir) })
	m1, err := mountinfo.Top(dir)
	if err != nil || m1 == nil || m1.FSType != "sysfs" || !mountinfo.HasOpt(m1.Opts, "ro") {
		t.Fatalf("shared sysfs: %+v %v", m1, err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "class/net"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "lo" {
		t.Fatalf("class/net of the shared sysfs: %v %v", ents, err)
	}
	if pin, err := mountinfo.Top(SysfsNetnsPath(dir)); err != nil || pin == nil || pin.FSType != "nsfs" {
		t.Fatalf("network namespace pin: %+v %v", pin, err)
	}
	// a second call (a restarted agent) reuses the mount
	if err := MountSharedSysfs(dir); err != nil {
		t.Fatal(err)
	}
	if m2, _ := mountinfo.Top(dir); m2 == nil || m2.ID != m1.ID {
		t.Fatalf("not reused: %+v then %+v", m1, m2)
	}
	if err := UnmountSharedSysfs(dir); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountinfo.Top(dir); m != nil {
		t.Fatalf("still mounted: %+v", m)
	}
	for _, p := range []string{dir, SysfsNetnsPath(dir)} {
		if m, _ := mountinfo.Top(p); m != nil {
			t.Fatalf("still mounted: %+v", m)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left: %v", p, err)
		}
	}
	// something else mounted there is replaced
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatal(err)
	}
	if err := MountSharedSysfs(dir); err != nil {
		t.Fatal(err)
	}
	on, err := mountinfo.On(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range on {
		if m.FSType != "sysfs" {
			t.Errorf("stale mount kept: %+v", m)
		}
	}
	if len(on) != 1 {
		t.Fatalf("%d mounts on %s", len(on), dir)
	}
	if err := UnmountSharedSysfs(dir); err != nil {
		t.Fatal(err)
	}
}

// TestSysfsOutlivesUnmount: a sandbox keeps its /sys, including the lo of the
// namespace the shared sysfs shows, after the shared mount is gone.
func TestSysfsOutlivesUnmount(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "sysfs")
	if err := MountSharedSysfs(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { UnmountSharedSysfs(dir) })
	var pinned unix.Stat_t
	if err := unix.Stat(SysfsNetnsPath(dir), &pinned); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t, func(c *SpawnConfig) { c.SysfsPath = dir })
	if err := UnmountSharedSysfs(dir); err != nil {
		t.Fatal(err)
	}
	// the init holds the namespace
	fdDir := fmt.Sprintf("/proc/%d/fd", s.init.PID)
	ents, _ := os.ReadDir(fdDir)
	held := false
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(fdDir, e.Name()), &st) == nil && st.Dev == pinned.Dev && st.Ino == pinned.Ino {
			held = true
		}
	}
	if !held {
		t.Fatalf("init holds no fd of the sysfs network namespace %d", pinned.Ino)
	}
	// namespace teardown is asynchronous
	var r result
	if !testwait.Until(10*time.Second, func() bool { r = s.sh(t, "ls /sys/class/net"); return r.stdout == "lo\n" }) {
		t.Fatalf("class/net 10 s after unmount: %q %q", r.stdout, r.stderr)
	}
}
