package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/mountinfo"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// FavorName is the cgroup v1 hierarchy FavorDynMods mounts: named, with no
// controller, so no process is ever limited or accounted by it.
const FavorName = "dsec-favordynmods"

// FavorDynMods makes moving a process into a cgroup quick on a cgroup v1
// host, by mounting the controller-less hierarchy FavorName with the
// kernel's favordynmods option on dir (created if missing).
//
// Every move into a cgroup (a sandbox's init joining its groups, a judged
// run joining its slot) takes the kernel's threadgroup lock for writing. In
// its default mode that waits for an RCU grace period whenever no other
// move happened just before: about 5 ms per create on an idle 2-core host,
// against 0.1 ms with favordynmods. The option is host-wide: forks and
// exits take the lock's slower read side, which Linux 6.18 replaced by a
// lock per thread group; and Linux 6.18 keeps it on until the next boot
// once any hierarchy turned it on, which it says in the kernel log.
//
// release unmounts dir and removes it (nothing when that was done already). A kernel whose cgroup v1 has no
// favordynmods (before Linux 6.1), and a cgroup v2 host (its creates clone
// straight into the cgroup, see SpawnConfig.CgroupFD), get an error wrapping
// errors.ErrUnsupported and nothing is mounted.
func (h *Hierarchy) FavorDynMods(dir string) (release func() error, err error) {
	return h.favorDynMods(dir, FavorName)
}

// favorDynMods is FavorDynMods with the hierarchy's name (tests use their
// own).
func (h *Hierarchy) favorDynMods(dir, name string) (release func() error, err error) {
	dir = filepath.Clean(dir)
	if h.version != 1 {
		return nil, errdefs.Wrap(api.CodeNotImplemented, errors.ErrUnsupported,
			"favordynmods: cgroup v%d: a new sandbox is cloned into its cgroup, nothing is moved", h.version)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("favordynmods: %w", err)
	}
	release = func() error {
		err := unix.Unmount(dir, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(dir, unix.MNT_DETACH)
		}
		// EINVAL, ENOENT: already released by another driver on the same dir
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("favordynmods: unmount %s: %w", dir, err)
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("favordynmods: %w", err)
		}
		return nil
	}
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
		err := unix.Mount("cgroup", dir, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
			"none,name="+name+",favordynmods")
		if err != nil {
			_ = os.Remove(dir)
			if errors.Is(err, unix.EINVAL) {
				return nil, errdefs.Wrap(api.CodeNotImplemented, errors.ErrUnsupported,
					"favordynmods: this kernel's cgroup v1 has no favordynmods option (Linux 6.1+): %v", err)
			}
			return nil, fmt.Errorf("favordynmods: mount a named cgroup v1 hierarchy on %s: %w", dir, err)
		}
	} // else left mounted by an agent that ended without Close: reused
	// A hierarchy of that name mounted earlier without the option keeps its
	// own options (the kernel only warns): then nothing is favoured.
	m, err := mountinfo.Top(dir)
	switch {
	case err != nil:
	case m == nil || m.FSType != "cgroup":
		err = fmt.Errorf("%s is not a cgroup mount point", dir)
	case !mountinfo.HasOpt(m.Supers, "favordynmods"):
		err = fmt.Errorf("hierarchy %s is mounted without it (%s)", name, m.Supers)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("favordynmods: %w", err), release())
	}
	return release, nil
}
