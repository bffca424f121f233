package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/mountinfo"
)

// mountsOn counts the mounts stacked on dir.
func mountsOn(t *testing.T, dir string) int {
	t.Helper()
	on, err := mountinfo.On(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(on)
}

// TestHostFavorDynMods: on a cgroup v1 host FavorDynMods mounts the named,
// controller-less hierarchy with favordynmods (every process then lists
// it in /proc/PID/cgroup), two nodes share it, a leftover mount is reused
// rather than stacked, and each release takes away its own mount and
// directory only. A hierarchy of that name mounted without the option is
// refused. On cgroup v2 nothing is mounted and the error says why.
func TestHostFavorDynMods(t *testing.T) {
	h := hostHierarchy(t)
	base := t.TempDir()
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	relA, err := h.FavorDynMods(a)
	if h.Version() == 2 {
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "cgroup v2") {
			t.Fatalf("cgroup v2: %v, want unsupported", err)
		}
		if _, serr := os.Stat(a); !errors.Is(serr, os.ErrNotExist) {
			t.Fatalf("cgroup v2: %s made (%v)", a, serr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(a, unix.MNT_DETACH); _ = unix.Unmount(b, unix.MNT_DETACH) })
	m, err := mountinfo.Top(a)
	if err != nil || m == nil || m.FSType != "cgroup" || !mountinfo.HasOpt(m.Supers, "favordynmods") || !mountinfo.HasOpt(m.Supers, "name="+FavorName) {
		t.Fatalf("mount on %s: %+v (%v)", a, m, err)
	}
	if own, _ := os.ReadFile("/proc/self/cgroup"); !strings.Contains(string(own), ":name="+FavorName+":") {
		t.Errorf("/proc/self/cgroup does not list the hierarchy:\n%s", own)
	}
	relB, err := h.FavorDynMods(b)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.FavorDynMods(a) // left mounted by an agent that never closed
	if err != nil || mountsOn(t, a) != 1 {
		t.Fatalf("again on %s: %v, %d mounts", a, err, mountsOn(t, a))
	}
	if err := relA(); err != nil {
		t.Fatal(err)
	}
	if err := again(); err != nil { // the same dir, released already
		t.Fatalf("second release of %s: %v", a, err)
	}
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) || mountsOn(t, a) != 0 {
		t.Fatalf("after release %s: %v, %d mounts", a, err, mountsOn(t, a))
	}
	if m, _ := mountinfo.Top(b); m == nil || m.FSType != "cgroup" {
		t.Fatalf("releasing %s took %s's mount: %+v", a, b, m)
	}
	if err := relB(); err != nil || mountsOn(t, b) != 0 {
		t.Fatalf("release %s: %v, %d mounts", b, err, mountsOn(t, b))
	}

	// A hierarchy of the name mounted without favordynmods keeps its
	// options: refused, and nothing is left on the new directory.
	name := fmt.Sprintf("dsec-test-nofavor-%d", os.Getpid())
	plain, c := filepath.Join(base, "plain"), filepath.Join(base, "c")
	if err := os.Mkdir(plain, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("cgroup", plain, "cgroup", 0, "none,name="+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(plain, unix.MNT_DETACH); _ = unix.Unmount(c, unix.MNT_DETACH) })
	if _, err := h.favorDynMods(c, name); err == nil || !strings.Contains(err.Error(), "without it") {
		t.Fatalf("hierarchy without favordynmods: %v, want refused", err)
	}
	if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) || mountsOn(t, c) != 0 {
		t.Fatalf("refused: %s left (%v, %d mounts)", c, err, mountsOn(t, c))
	}
}
