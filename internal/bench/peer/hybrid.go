package peer

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// crun (1.8.1 at least) refuses to run any container when the host has a
// hybrid cgroup layout whose cgroup2 hierarchy (/sys/fs/cgroup/unified) has
// a controller bound to it ("cgroups in hybrid mode not supported, drop all
// controllers from cgroupv2") — even with --cgroup-manager=disabled, because
// the check comes before the manager is chosen. Without touching the host,
// crun's benchmark workers therefore each run on a locked OS thread with a
// private mount namespace from which the cgroup2 mount is detached; crun then
// sees a plain cgroup v1 host, and with the disabled manager it touches no
// cgroups at all. The containers it starts inherit that mount namespace as
// the parent of their own, which changes nothing inside them (the peer spec
// mounts no cgroup file system). There is no per-container cost: the
// namespace is made once per worker.

const unifiedCgroup = "/sys/fs/cgroup/unified"

// hybridWithControllers reports whether this host has the hybrid layout crun
// refuses.
func hybridWithControllers() bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil || st.Type != 0x01021994 /* TMPFS_MAGIC */ {
		return false
	}
	if err := syscall.Statfs(unifiedCgroup, &st); err != nil || st.Type != 0x63677270 /* CGROUP2_SUPER_MAGIC */ {
		return false
	}
	b, err := os.ReadFile(filepath.Join(unifiedCgroup, "cgroup.controllers"))
	return err == nil && len(strings.TrimSpace(string(b))) > 0
}

// needsHybridWorkaround reports whether r must run in a mount namespace
// without the cgroup2 hierarchy.
func needsHybridWorkaround(r Runtime) bool {
	return (r.Name == "crun" || filepath.Base(r.Path) == "crun") && hybridWithControllers()
}

// hideUnifiedCgroup locks the calling goroutine to its OS thread and moves
// that thread into a private mount namespace without the cgroup2 mount.
// Processes started from this goroutine afterwards inherit the namespace.
// The goroutine must exit without calling runtime.UnlockOSThread, so that the
// Go runtime discards the thread instead of reusing it.
func hideUnifiedCgroup() error {
	runtime.LockOSThread()
	// CLONE_NEWNS implies CLONE_FS: only this thread is affected.
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("peer: unshare mount namespace: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("peer: make mounts private: %w", err)
	}
	if err := syscall.Unmount(unifiedCgroup, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("peer: detach %s: %w", unifiedCgroup, err)
	}
	return nil
}

// Worker runs functions one at a time on one goroutine; for r that needs the
// hybrid workaround (see above) that goroutine's thread is in a private mount
// namespace without the cgroup2 hierarchy, so the runtime processes started
// from it see none. stop ends the worker.
func Worker(r Runtime) (do func(func()), stop func(), err error) {
	ch := make(chan func())
	ready := make(chan error, 1)
	go func() {
		if needsHybridWorkaround(r) {
			// Never unlocked: the thread is discarded with its mount
			// namespace when this goroutine exits.
			if err := hideUnifiedCgroup(); err != nil {
				ready <- err
				return
			}
		}
		ready <- nil
		for f := range ch {
			f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, nil, err
	}
	return func(f func()) {
		done := make(chan struct{})
		ch <- func() { f(); close(done) }
		<-done
	}, func() { close(ch) }, nil
}
