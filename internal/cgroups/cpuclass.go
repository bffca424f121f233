package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// CPU classes. A latency-sensitive (LS) group competes normally; a best-effort
// (BE) group is idle to the scheduler. On v1 its cpu directory lives in the
// idle parent "P-be" with cpu.idle=1, a sibling of the LS groups' parent P (not
// a child of it: BE work inside P would spend P's share, and P's LS groups
// would then wait behind the rest of the host when they wake); all BE work
// together gets idle weight against everything else. On v2, where a process
// cannot sit in one place for cpu and another for memory, the group's own
// cpu.idle is 1 (idle against its LS siblings). Every thread of a BE group also
// runs SCHED_IDLE (SetThreadsIdle).

// IdleParent is the suffix of the idle parent's name ("P-be" for parent P;
// "be" for groups at the top).
const IdleParent = "be"

// pathIn is the directory of group name under mount m: the idle parent's child
// for an idle group in the v1 cpu hierarchy.
func (h *Hierarchy) pathIn(m, name string, idle bool) string {
	if idle && h.version == 1 && m == h.mounts[ctrlCPU] {
		return filepath.Join(h.idleParentDir(name), filepath.Base(name))
	}
	return filepath.Join(h.base(m), name)
}

// idleParentDir is the idle parent for the groups next to name (v1 cpu).
func (h *Hierarchy) idleParentDir(name string) string {
	return idleOf(filepath.Join(h.base(h.mounts[ctrlCPU]), filepath.Dir(name)), h.mounts[ctrlCPU])
}

// idleOf is the idle parent for the groups in directory dir of mount m.
func idleOf(dir, m string) string {
	if filepath.Clean(dir) == filepath.Clean(m) {
		return filepath.Join(m, IdleParent)
	}
	return filepath.Clean(dir) + "-" + IdleParent
}

// isIdle reports whether group name exists as a best-effort group.
func (h *Hierarchy) isIdle(name string) bool {
	if h.version == 2 {
		v, err := readInt(filepath.Join(h.root, h.parent, name, "cpu.idle"))
		return err == nil && v == 1
	}
	_, err := os.Stat(h.pathIn(h.mounts[ctrlCPU], name, true))
	return err == nil
}

// mkIdleParent makes sure the idle parent next to name exists with
// cpu.idle=1 (v1, idle groups only), appending it to made if it created it.
func (h *Hierarchy) mkIdleParent(name string, idle bool, made []string) ([]string, error) {
	if !idle || h.version != 1 {
		return made, nil
	}
	dir := h.idleParentDir(name)
	switch err := h.mkdir(dir); {
	case err == nil:
		made = append(made, dir)
	case !errors.Is(err, os.ErrExist):
		return made, err
	}
	if err := writeIdle(dir); err != nil {
		return made, fmt.Errorf("idle parent: %w", err)
	}
	return made, nil
}

// writeIdle makes the v1 idle parent dir idle: cpu.idle=1 (Linux 5.15+), or
// on kernels without it the smallest cpu.shares, so the group still yields to
// every other (its threads run SCHED_IDLE either way).
func writeIdle(dir string) error {
	err := writeFile(filepath.Join(dir, "cpu.idle"), "1")
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return writeFile(filepath.Join(dir, "cpu.shares"), "2")
}

// SetCPUWeight sets the cpu weight of group dir name (relative to the cpu
// mount, or to the Hierarchy's parent) on cgroup v2's scale: 1 to 10000,
// 100 being every group's default; on v1 cpu.shares gets weight × 1024 / 100.
// A heavier parent wins the CPU, and wake-up preemption, over the rest of the
// host (the node's own threads, other services) in proportion.
func (h *Hierarchy) SetCPUWeight(name string, weight int) error {
	if weight < 1 || weight > 10000 {
		return errdefs.Invalid("cpu weight %d: must be 1 to 10000", weight)
	}
	dir := filepath.Join(h.base(h.mounts[ctrlCPU]), name)
	f, v := "cpu.shares", strconv.Itoa(weight*1024/100)
	if h.version == 2 {
		dir = filepath.Join(h.root, h.parent, name)
		f, v = "cpu.weight", strconv.Itoa(weight)
	}
	if err := writeFile(filepath.Join(dir, f), v); err != nil {
		return fmt.Errorf("cgroup %q: cpu weight: %w", name, err)
	}
	return nil
}

// CPUWeight reads back what SetCPUWeight set (v2 scale).
func (h *Hierarchy) CPUWeight(name string) (int, error) {
	if h.version == 2 {
		v, err := readInt(filepath.Join(h.root, h.parent, name, "cpu.weight"))
		return int(v), err
	}
	v, err := readInt(filepath.Join(h.base(h.mounts[ctrlCPU]), name, "cpu.shares"))
	return int((v*100 + 512) / 1024), err
}

// RemoveIdleParent removes the idle parent of parent's groups once it is empty
// (v1; a no-op elsewhere or while best-effort groups remain).
func (h *Hierarchy) RemoveIdleParent(parent string) error {
	if h.version != 1 {
		return nil
	}
	m := h.mounts[ctrlCPU]
	err := h.rmdir(idleOf(filepath.Join(h.base(m), parent), m))
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOTEMPTY) {
		return nil
	}
	return fmt.Errorf("remove idle parent of %q: %w", parent, err)
}

// RemoveParent removes the Hierarchy's own parent directory (WithParent) in
// every mount, and on v1 its idle parent, once they hold no group: a parent
// with groups left is kept without an error. A Hierarchy without a parent has
// nothing to remove.
func (h *Hierarchy) RemoveParent() error {
	if h.parent == "" {
		return nil
	}
	if err := h.RemoveIdleParent(""); err != nil {
		return err
	}
	for _, m := range h.mountDirs() {
		err := h.rmdir(h.base(m))
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("remove cgroup parent %q: %w", h.parent, err)
		}
	}
	return nil
}

// IdleCPUDir is the directory whose cpu.idle makes this group best-effort: the
// idle parent on v1, the group itself on v2.
func (g *Group) IdleCPUDir() string {
	if g.h.version == 2 {
		return g.dirs[0]
	}
	return g.h.idleParentDir(g.name)
}

// CPUDir is the group's current directory in the cpu hierarchy.
func (g *Group) CPUDir() string { return g.dir(ctrlCPU) }

// Idle reports whether the group is best-effort.
func (g *Group) Idle() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.idle
}

// paths is a copy of the group's directories, one per mount.
func (g *Group) paths() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return slices.Clone(g.dirs)
}

// SetIdle changes the group's CPU class at runtime. On v1 it creates the
// group's cpu directory on the other side (with the same CPU quota), moves
// every process there (each move takes all of a process's threads), repeats
// while forks race it, and removes the old directory; on v2 it writes cpu.idle.
// It then sets every thread's policy (SetThreadsIdle). Memory, pids and the
// freezer are untouched.
func (g *Group) SetIdle(idle bool) error {
	g.mu.Lock()
	if g.idle != idle {
		if err := g.moveCPU(idle); err != nil {
			g.mu.Unlock()
			return fmt.Errorf("cgroup %q: set cpu class: %w", g.name, err)
		}
	}
	g.mu.Unlock()
	return g.SetThreadsIdle(idle)
}

// moveCPU does SetIdle's move (g.mu held).
func (g *Group) moveCPU(idle bool) error {
	if g.h.version == 2 {
		v := "0"
		if idle {
			v = "1"
		}
		if err := writeFile(filepath.Join(g.dirs[0], "cpu.idle"), v); err != nil {
			return err
		}
		g.idle = idle
		return nil
	}
	m := g.h.mounts[ctrlCPU]
	from, to := g.h.pathIn(m, g.name, g.idle), g.h.pathIn(m, g.name, idle)
	if _, err := g.h.mkIdleParent(g.name, idle, nil); err != nil {
		return err
	}
	if err := g.h.mkdir(to); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	for _, f := range []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.shares"} {
		if v, err := readString(filepath.Join(from, f)); err == nil {
			_ = writeOptional(filepath.Join(to, f), v)
		}
	}
	for range maxKillRounds {
		pids, err := readPids(filepath.Join(from, "cgroup.procs"))
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if err := writeFile(filepath.Join(to, "cgroup.procs"), strconv.Itoa(pid)); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("move pid %d: %w", pid, err)
			}
		}
	}
	if err := g.h.rmdir(from); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", from, err)
	}
	for i, d := range g.dirs {
		if d == from {
			g.dirs[i] = to
		}
	}
	g.idle = idle
	return nil
}

// Threads lists the thread IDs in the group (v1 tasks of the cpu hierarchy,
// v2 cgroup.threads).
func (g *Group) Threads() ([]int, error) {
	f := filepath.Join(g.dir(ctrlCPU), "tasks")
	if g.h.version == 2 {
		f = filepath.Join(g.dirs[0], "cgroup.threads")
	}
	return readPids(f)
}

// SetThreadsIdle sets every thread in the group to SCHED_IDLE (idle) or back to
// SCHED_OTHER, with the Hierarchy's slice of the class (WithSlices), keeping each
// thread's nice value. Threads created by a thread already switched inherit its
// policy and slice; the sweep runs twice for ones created meanwhile by threads
// not yet switched.
func (g *Group) SetThreadsIdle(idle bool) error {
	slice := g.h.slice(idle)
	for range 2 {
		tids, err := g.Threads()
		if err != nil {
			return fmt.Errorf("cgroup %q: %w", g.name, err)
		}
		for _, tid := range tids {
			if err := SetSchedClass(tid, idle, slice); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("cgroup %q: thread %d: %w", g.name, tid, err)
			}
		}
	}
	return nil
}

// slice is the scheduler slice of a class's threads (WithSlices; 0: the
// kernel's default).
func (h *Hierarchy) slice(idle bool) time.Duration {
	if idle {
		return h.beSlice
	}
	return h.lsSlice
}

// Slices are the scheduler slices LS and BE threads ask for (WithSlices; 0:
// the kernel's default).
func (h *Hierarchy) Slices() (ls, be time.Duration) { return h.lsSlice, h.beSlice }

// SetProcessClass gives a new process (before it runs; its children inherit
// it) the policy of its class, as SetIdle gives a group's threads: SCHED_IDLE
// with the BE slice (idle), or the LS slice. An LS process with the kernel's
// default slice is left as it is (SCHED_OTHER already).
func (h *Hierarchy) SetProcessClass(pid int, idle bool) error {
	slice := h.slice(idle)
	if !idle && slice == 0 {
		return nil
	}
	return SetSchedClass(pid, idle, slice)
}

// SetSchedIdle sets one thread's policy to SCHED_IDLE or SCHED_OTHER (with the
// kernel's default slice), keeping its nice value.
func SetSchedIdle(tid int, idle bool) error { return SetSchedClass(tid, idle, 0) }

// SetSchedClass sets one thread's policy for a CPU class, keeping its nice
// value: SCHED_IDLE for BE (idle), SCHED_OTHER for LS, asking for slice as its
// scheduler slice (sched_attr.sched_runtime: EEVDF's request size, Linux 6.12+;
// older kernels ignore it; 0: the kernel's default). Children inherit the
// slice. Real-time threads are left alone (a sandbox cannot make any).
func SetSchedClass(tid int, idle bool, slice time.Duration) error {
	cur, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return err
	}
	want := uint32(unix.SCHED_NORMAL)
	var runtime uint64
	if idle {
		want = unix.SCHED_IDLE
	}
	if slice > 0 {
		runtime = uint64(slice.Nanoseconds())
	}
	if cur.Policy != unix.SCHED_NORMAL && cur.Policy != unix.SCHED_IDLE && cur.Policy != unix.SCHED_BATCH {
		return nil
	}
	if cur.Policy == want && (runtime == 0 || cur.Runtime == runtime) {
		return nil
	}
	// (SCHED_FLAG_KEEP_PARAMS would keep the policy too.)
	return unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: want, Nice: cur.Nice, Runtime: runtime}, 0)
}

// SchedSlice returns a thread's scheduler slice (Linux 6.12+; the base slice
// unless the thread asked for another, 0 on older kernels).
func SchedSlice(tid int) (time.Duration, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, err
	}
	return time.Duration(a.Runtime), nil
}

// SchedPolicy returns a thread's scheduling policy (unix.SCHED_*).
func SchedPolicy(tid int) (int, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return -1, err
	}
	return int(a.Policy), nil
}

// CPUClass is a sandbox's CPU class.
type CPUClass string

// The CPU classes.
const (
	ClassLS CPUClass = "ls" // latency-sensitive
	ClassBE CPUClass = "be" // best-effort
)

// ParseCPUClass accepts "ls" and "be"; "" means def.
func ParseCPUClass(s string, def CPUClass) (CPUClass, error) {
	switch CPUClass(s) {
	case "":
		return def, nil
	case ClassLS, ClassBE:
		return CPUClass(s), nil
	}
	return "", errdefs.New(api.CodeInvalidArgument, "cpu_class %q: must be %q or %q", s, ClassLS, ClassBE)
}

// Core scheduling (prctl PR_SCHED_CORE, CONFIG_SCHED_CORE): LS sandboxes get a
// cookie of their own so no other task shares their SMT core.
const (
	prSchedCore       = 62 // PR_SCHED_CORE
	prSchedCoreGet    = 0
	prSchedCoreCreate = 1
	pidtypeTGID       = 1
)

// CoreSchedAvailable reports whether the kernel has core scheduling: a
// PR_SCHED_CORE_GET on ourselves fails with EINVAL without CONFIG_SCHED_CORE.
func CoreSchedAvailable() bool {
	var cookie uint64
	_, _, e := unix.Syscall6(unix.SYS_PRCTL, prSchedCore, prSchedCoreGet, 0, pidtypeTGID, uintptr(unsafe.Pointer(&cookie)), 0)
	return e == 0
}

// CoreSchedCreate gives process pid's thread group a new core-scheduling cookie
// (inherited by its children).
func CoreSchedCreate(pid int) error {
	if _, _, e := unix.Syscall6(unix.SYS_PRCTL, prSchedCore, prSchedCoreCreate, uintptr(pid), pidtypeTGID, 0, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SCHED_CORE_CREATE, %d): %w", pid, e)
	}
	return nil
}

// idleChildren lists the entries of the idle parent of the groups in dir of
// mount m (none if absent).
func idleChildren(dir, m string) []os.DirEntry {
	ents, _ := os.ReadDir(idleOf(dir, m))
	return ents
}
