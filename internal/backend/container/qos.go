package container

import (
	"context"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/reclaim"
	"github.com/dsec-dev/dsec/pkg/api"
)

var (
	_ driver.CPUClasser = (*instance)(nil)
	_ driver.Reclaimer  = (*instance)(nil)
)

// CoreScheduling reports whether LS sandboxes get a core-scheduling cookie.
func (d *Driver) CoreScheduling() bool { return d.coreSched }

// LSCPUWeight is the cpu weight given to the sandboxes' parent (v2 scale; -1:
// the kernel's default).
func (d *Driver) LSCPUWeight() int { return d.cfg.LSCPUWeight }

// LSSlice is the scheduler slice LS threads ask for (0: the kernel's default);
// the cgroup Hierarchy applies it.
func (d *Driver) LSSlice() time.Duration { ls, _ := d.cg.Slices(); return ls }

// BESlice is the scheduler slice BE threads ask for (0: the kernel's default).
func (d *Driver) BESlice() time.Duration { _, be := d.cg.Slices(); return be }

// Defaults of Config.LSCPUWeight, Config.LSSlice and Config.BESlice. The LS
// parent weighs 8 default groups: when LS sandboxes and the rest of the host
// (the node's own threads, other services) want the CPU at once, LS work gets
// 8/9 of it. LS threads ask for a 4 ms slice (the kernel's base slice is 0.7 ms
// × (1 + log2 CPUs)): under BE saturation an LS thread's burst otherwise loses
// a whole scheduler tick to a BE thread now and then (EEVDF picks the idle
// entity at a tick once the LS one has used its protected slice); `dsec bench
// qos` measured the 4 ms slice at 0.36× the LS time lost that way
// (docs/performance.md).
const (
	DefaultLSCPUWeight = 800
	DefaultLSSlice     = 4 * time.Millisecond
	DefaultBESlice     = -1
)

// applyCPUClass sets a new init's policy before it runs (its children inherit
// it): the class's policy and slice, which the cgroup Hierarchy holds and
// applies (as it does when a class changes, SetCPUClass), and for LS a
// core-scheduling cookie where the kernel has it. The first call also weighs
// the sandboxes' parent.
func (d *Driver) applyCPUClass(pid int, idle bool) error {
	d.weighted.Do(d.weighParent)
	if err := d.cg.SetProcessClass(pid, idle); err != nil || idle {
		return err
	}
	if d.coreSched {
		return cgroups.CoreSchedCreate(pid)
	}
	return nil
}

// weighParent sets CgroupParent's cpu weight (Config.LSCPUWeight); a failure
// is logged: sandboxes then compete at the default weight.
func (d *Driver) weighParent() {
	if d.cfg.LSCPUWeight < 0 {
		return
	}
	if err := d.cg.SetCPUWeight(d.cfg.CgroupParent, d.cfg.LSCPUWeight); err != nil {
		d.log.Warn("LS cpu weight", "err", err)
	}
}

// SetCPUClass implements driver.CPUClasser: the sandbox's cpu cgroup moves to
// or from the idle parent and every thread's policy follows.
func (in *instance) SetCPUClass(ctx context.Context, class string) error {
	c, err := cgroups.ParseCPUClass(class, cgroups.ClassLS)
	if err != nil {
		return err
	}
	if err := in.cg.SetIdle(c == cgroups.ClassBE); err != nil {
		if !in.alive() {
			return in.gone()
		}
		return errdefs.Internal(err, "set cpu class")
	}
	if c == cgroups.ClassLS && in.d.coreSched {
		if err := cgroups.CoreSchedCreate(in.st.PID); err != nil {
			in.d.log.Warn("core scheduling cookie", "id", in.id, "err", err)
		}
	}
	return nil
}

// CPUClass is the class the sandbox's cgroup is in.
func (in *instance) CPUClass() string {
	if in.cg.Idle() {
		return api.CPUClassBE
	}
	return api.CPUClassLS
}

func (in *instance) target() (reclaim.Target, error) {
	pids, err := in.cg.Procs()
	if err != nil {
		return reclaim.Target{}, errdefs.Internal(err, "list sandbox processes")
	}
	return reclaim.Target{Pids: pids, MemDir: in.cg.Path(), V2: in.d.cg.Version() == 2}, nil
}

// Pids implements driver.Reclaimer.
func (in *instance) Pids() ([]int, error) {
	t, err := in.target()
	return t.Pids, err
}

// Reclaim implements driver.Reclaimer.
func (in *instance) Reclaim(ctx context.Context) (api.ReclaimResult, error) {
	t, err := in.target()
	if err != nil {
		return api.ReclaimResult{}, err
	}
	res, err := reclaim.Reclaim(ctx, t)
	if err != nil {
		return res, errdefs.Internal(err, "reclaim sandbox memory")
	}
	return res, nil
}

// Prefetch implements driver.Reclaimer.
func (in *instance) Prefetch(ctx context.Context) error {
	t, err := in.target()
	if err != nil {
		return err
	}
	if _, err := reclaim.Prefetch(ctx, t); err != nil {
		return errdefs.Internal(err, "prefetch sandbox memory")
	}
	return nil
}

// PageOutCold implements driver.Reclaimer: pages out the anonymous memory of a
// running sandbox (the caller decides it is idle, and throttles).
func (in *instance) PageOutCold(ctx context.Context) (int64, error) {
	t, err := in.target()
	if err != nil {
		return 0, err
	}
	if free, _ := reclaim.SwapFree(); free <= 0 {
		return 0, nil
	}
	n, err := reclaim.AdviseAll(ctx, t.Pids, unix.MADV_PAGEOUT)
	if err != nil {
		return n, errdefs.Internal(err, "page out idle sandbox")
	}
	return n, nil
}

// CgroupParent is the parent cgroup of this driver's sandboxes.
func (d *Driver) CgroupParent() string { return d.cfg.CgroupParent }

// CgroupMemoryUsage is the memory use of all this driver's sandboxes together
// (their parent memory cgroup).
func (d *Driver) CgroupMemoryUsage() (int64, error) {
	g, err := d.cg.Open(d.cfg.CgroupParent)
	if err != nil {
		return 0, err
	}
	return g.MemoryUsage()
}
