package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// Controller names used by this package.
const (
	ctrlCPU     = "cpu"
	ctrlCPUAcct = "cpuacct"
	ctrlMemory  = "memory"
	ctrlPids    = "pids"
	ctrlFreezer = "freezer"
)

// v1Required are the v1 controllers a Hierarchy cannot work without, memory
// first; cpuacct is optional (CPUUsage then reports not_implemented).
func v1Required() []string { return []string{ctrlMemory, ctrlCPU, ctrlPids, ctrlFreezer} }

// v2Wanted are the controllers enabled in the parents' cgroup.subtree_control.
func v2Wanted() []string { return []string{ctrlCPU, ctrlMemory, ctrlPids} }

// Hierarchy is the detected cgroup layout of the host. It is safe for
// concurrent use.
type Hierarchy struct {
	version int
	parent  string // relative to every mount, "" for the mount itself
	// lsSlice and beSlice are the scheduler slices LS and BE threads ask
	// for (WithSlices).
	lsSlice, beSlice time.Duration

	// v2
	root   string // the unified mount
	enable string // e.g. "+cpu +memory +pids": wanted ∩ available at root

	// v1
	mounts map[string]string // controller -> its hierarchy's mount dir
	dirs   []string          // unique mount dirs, memory's first

	// devprogs are the loaded v2 device programs, one per policy;
	// devShared the v1 shared devices cgroups set up so far.
	devprogs  devicePrograms
	devShared sync.Map
	devMu     sync.Mutex

	// enabled caches v2 dirs whose subtree_control already got h.enable.
	enabled sync.Map
	// mkdir creates and rmdir removes one cgroup directory; tests replace
	// them to imitate the kernel's control files on a plain file system.
	mkdir func(path string) error
	rmdir func(path string) error
}

// Option configures Detect.
type Option func(*Hierarchy) error

// WithParent makes every group name relative to parent (a relative path such
// as "dsec") inside each controller's mount: with WithParent("dsec"),
// Create("sb-abc") makes <mount>/dsec/sb-abc and List("") lists dsec's
// children. Without it names are relative to the mounts themselves, so
// Create("dsec/sb-abc") is equivalent.
func WithParent(parent string) Option {
	return func(h *Hierarchy) error {
		if parent == "" {
			h.parent = ""
			return nil
		}
		if err := checkName(parent); err != nil {
			return err
		}
		h.parent = parent
		return nil
	}
}

// WithSlices makes SetIdle give every thread of the group ls (LS) or be (BE)
// as its scheduler slice (SetSchedClass; 0: the kernel's default).
func WithSlices(ls, be time.Duration) Option {
	return func(h *Hierarchy) error {
		if ls < 0 || be < 0 {
			return errdefs.Invalid("scheduler slices %v, %v: must not be negative", ls, be)
		}
		h.lsSlice, h.beSlice = ls, be
		return nil
	}
}

// Detect inspects mountRoot (usually "/sys/fs/cgroup") once. It picks cgroup
// v2 when mountRoot/cgroup.controllers lists memory; otherwise v1, finding
// each controller's hierarchy as a directory under mountRoot holding
// cgroup.procs, named after the controller or a comma-joined list containing
// it ("cpu,cpuacct"); symlinks are followed and co-mounted controllers share
// one directory. v1 needs memory, cpu, pids and freezer; cpuacct is optional.
// Any directory laid out like a cgroup mount works, which tests use.
func Detect(mountRoot string, opts ...Option) (*Hierarchy, error) {
	h, err := detect(mountRoot, true)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// detect does the work of Detect; requireMemory=false accepts a cgroup2 mount
// without controllers (tests use the hybrid host's empty unified mount).
func detect(mountRoot string, requireMemory bool) (*Hierarchy, error) {
	h := &Hierarchy{mkdir: mkdirCgroup, rmdir: unix.Rmdir}
	if ctrls, err := os.ReadFile(filepath.Join(mountRoot, "cgroup.controllers")); err == nil {
		avail := strings.Fields(string(ctrls))
		if slices.Contains(avail, ctrlMemory) || !requireMemory {
			h.version = 2
			h.root = mountRoot
			var en []string
			for _, c := range v2Wanted() {
				if slices.Contains(avail, c) {
					en = append(en, "+"+c)
				}
			}
			h.enable = strings.Join(en, " ")
			return h, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("detect cgroups at %s: %w", mountRoot, err)
	}
	if err := h.detectV1(mountRoot); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *Hierarchy) detectV1(mountRoot string) error {
	entries, err := os.ReadDir(mountRoot)
	if err != nil {
		return fmt.Errorf("detect cgroups at %s: %w", mountRoot, err)
	}
	h.version = 1
	h.mounts = make(map[string]string)
	for _, ctrl := range append(v1Required(), ctrlCPUAcct, ctrlDevices) {
		candidates := []string{ctrl}
		for _, e := range entries {
			if e.Name() != ctrl && slices.Contains(strings.Split(e.Name(), ","), ctrl) {
				candidates = append(candidates, e.Name())
			}
		}
		for _, c := range candidates {
			dir := filepath.Join(mountRoot, c)
			if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
				continue // absent, or an unmounted placeholder directory
			}
			if real, err := filepath.EvalSymlinks(dir); err == nil {
				dir = real
			}
			h.mounts[ctrl] = dir
			break
		}
	}
	for _, ctrl := range v1Required() {
		if _, ok := h.mounts[ctrl]; !ok {
			return errdefs.Wrap(api.CodeNotImplemented, errors.ErrUnsupported,
				"detect cgroups at %s: no cgroup v2 with memory and no v1 %s hierarchy", mountRoot, ctrl)
		}
	}
	h.dirs = []string{h.mounts[ctrlMemory]}
	// devices is not a group directory: every group with one device
	// policy shares a devices cgroup (see sharedDevices), unless the
	// controller is co-mounted with one of these.
	for _, ctrl := range append(v1Required()[1:], ctrlCPUAcct) {
		if d, ok := h.mounts[ctrl]; ok && !slices.Contains(h.dirs, d) {
			h.dirs = append(h.dirs, d)
		}
	}
	return nil
}

// Close releases the loaded device programs (attached ones stay in force).
func (h *Hierarchy) Close() error { return h.devprogs.close() }

// Version is 1 or 2.
func (h *Hierarchy) Version() int { return h.version }

// Parent is the parent set with WithParent ("" when none).
func (h *Hierarchy) Parent() string { return h.parent }

// mountDirs are the directories a group has one cgroup in: the unified root
// on v2, every distinct controller mount on v1.
func (h *Hierarchy) mountDirs() []string {
	if h.version == 2 {
		return []string{h.root}
	}
	return h.dirs
}

// base is the directory under a mount that names are relative to.
func (h *Hierarchy) base(mount string) string { return filepath.Join(mount, h.parent) }

// List returns the names of parent's child groups (parent relative to the
// Hierarchy's parent, "" for the Hierarchy's parent itself), sorted, as names
// suitable for Open; on v1 the union over all controllers, so partly created
// leftovers show up too. A missing parent lists as empty.
func (h *Hierarchy) List(parent string) ([]string, error) {
	if parent != "" {
		if err := checkName(parent); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, m := range h.mountDirs() {
		entries, err := os.ReadDir(filepath.Join(h.base(m), parent))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list cgroups %q: %w", parent, err)
		}
		if h.version == 1 && m == h.mounts[ctrlCPU] {
			// Best-effort groups' cpu directories sit in the idle parent.
			entries = append(entries, idleChildren(filepath.Join(h.base(m), parent), m)...)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			n := e.Name()
			if parent != "" {
				n = parent + "/" + n
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// checkName accepts clean relative slash-separated paths without "..".
func checkName(name string) error {
	if name == "" || filepath.IsAbs(name) || filepath.Clean(name) != name ||
		name == "." || slices.Contains(strings.Split(name, "/"), "..") {
		return errdefs.Invalid("invalid cgroup name %q", name)
	}
	return nil
}

func mkdirCgroup(path string) error {
	if err := unix.Mkdir(path, 0o755); err != nil {
		return &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	return nil
}
