package initproto

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/mountinfo"
)

// A shared sysfs is one read-only sysfs mount that every sandbox init clones
// (open_tree) onto its /sys instead of mounting a sysfs of its own. Every
// superblock registers a shrinker, and every memory cgroup on the host pays
// per-memcg shrinker memory for the highest shrinker id, so per-sandbox
// superblocks make sandbox memory grow with the number of sandboxes.
//
// The sysfs is mounted from a thread in a fresh, empty network namespace:
// sysfs shows the network devices of its mounter's namespace, so sandboxes
// see only a loopback device there, never the host's interfaces. A sysfs
// holds only a passive reference to that namespace, so it is pinned by a
// bind mount of its nsfs file on SysfsNetnsPath(dir), and every init keeps
// that file open: the namespace (and its lo in /sys/class/net) lives as long
// as the pin or any sandbox using it.

const sharedSysfsFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// SysfsNetnsPath is the nsfs file pinning the network namespace of the
// shared sysfs on dir.
func SysfsNetnsPath(dir string) string { return dir + ".net" }

// MountSharedSysfs makes dir (created if missing) a read-only sysfs mount of
// an empty network namespace, for SpawnConfig.SysfsPath, pinned on
// SysfsNetnsPath(dir). A working pair already there (left by a previous
// process) is reused; anything else mounted there is detached first.
func MountSharedSysfs(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("initproto: shared sysfs: %w", err)
	}
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("initproto: shared sysfs: %w", err)
	}
	ok, err := checkSharedSysfs(dir)
	if err != nil || ok {
		return err
	}
	if err := detachAll(dir); err != nil {
		return err
	}
	if err := detachAll(SysfsNetnsPath(dir)); err != nil {
		return err
	}
	return mountSysfsInEmptyNetns(dir)
}

// UnmountSharedSysfs detaches the shared sysfs and its namespace pin
// (sandboxes keep their clones) and removes both files.
func UnmountSharedSysfs(dir string) error {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	} else if errors.Is(err, os.ErrNotExist) {
		dir = filepath.Clean(dir)
	}
	var errs []error
	for _, p := range []string{dir, SysfsNetnsPath(dir)} {
		if err := detachAll(p); err != nil {
			errs = append(errs, err)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("initproto: %w", err))
		}
	}
	return errors.Join(errs...)
}

// SharedSysfsMounted reports cheaply (one statfs) whether dir still holds a
// sysfs mount.
func SharedSysfsMounted(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.SYSFS_MAGIC
}

// detachAll lazily unmounts everything mounted on path.
func detachAll(path string) error {
	for i := 0; i < 16; i++ {
		m, err := mountinfo.Top(path)
		if err != nil || m == nil {
			return err
		}
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("initproto: detach mount on %s: %w", path, err)
		}
	}
	return fmt.Errorf("initproto: cannot clear the mounts on %s", path)
}

// mountSysfsInEmptyNetns mounts sysfs on dir from an OS thread that entered a
// new network namespace, and pins that namespace. The thread is never
// unlocked, so the runtime ends it with its goroutine and no other goroutine
// ever runs in that namespace.
func mountSysfsInEmptyNetns(dir string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("initproto: shared sysfs: unshare network namespace: %w", err)
			}
			pin := SysfsNetnsPath(dir)
			f, err := os.OpenFile(pin, os.O_RDONLY|os.O_CREATE, 0o400)
			if err != nil {
				return fmt.Errorf("initproto: shared sysfs: %w", err)
			}
			f.Close()
			if err := unix.Mount("/proc/thread-self/ns/net", pin, "", unix.MS_BIND, ""); err != nil {
				os.Remove(pin)
				return fmt.Errorf("initproto: pin network namespace on %s: %w", pin, err)
			}
			if err := unix.Mount("sysfs", dir, "sysfs", sharedSysfsFlags, ""); err != nil {
				unix.Unmount(pin, unix.MNT_DETACH)
				os.Remove(pin)
				return fmt.Errorf("initproto: mount shared sysfs on %s: %w", dir, err)
			}
			return nil
		}()
	}()
	return <-errc
}

// checkSharedSysfs reports whether dir is a working shared sysfs: a
// read-only sysfs showing no network device but lo, with its pin in place.
func checkSharedSysfs(dir string) (bool, error) {
	m, err := mountinfo.Top(dir)
	if err != nil || m == nil {
		return false, err
	}
	if m.FSType != "sysfs" || !SharedSysfsMounted(dir) || !mountinfo.HasOpt(m.Opts, "ro") {
		return false, nil
	}
	if pin, err := mountinfo.Top(SysfsNetnsPath(dir)); err != nil || pin == nil || pin.FSType != "nsfs" {
		return false, err
	}
	ents, err := os.ReadDir(filepath.Join(dir, "class/net"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "lo" {
		return false, nil
	}
	return true, nil
}
