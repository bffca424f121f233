package cgroups

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// cfsPeriodUs is the CFS period used for the CPU quota, in microseconds.
const cfsPeriodUs = 100000

// minQuotaUs is the smallest CFS quota the kernel accepts (1ms).
const minQuotaUs = 1000

// Limits are the resource limits of a group; a zero field means unlimited.
type Limits struct {
	CPU         float64 // cores, e.g. 0.5 or 2
	MemoryBytes int64   // memory (and, where the kernel allows, memory+swap)
	PidsMax     int64   // tasks (threads included)
	// Idle makes the group best-effort (CPU class "be"): on v1 its cpu
	// directory is created under the idle parent, on v2 its cpu.idle is 1.
	Idle    bool
	Devices DevicePolicy
}

// Validate rejects negative or out-of-range values.
func (l Limits) Validate() error {
	switch {
	case l.CPU < 0 || math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0):
		return errdefs.Invalid("cpu limit %v: must be >= 0", l.CPU)
	case l.CPU != 0 && l.quotaUs() < minQuotaUs:
		return errdefs.Invalid("cpu limit %v: below the minimum of %v cores", l.CPU, float64(minQuotaUs)/cfsPeriodUs)
	case l.CPU > 1<<20:
		return errdefs.Invalid("cpu limit %v: too large", l.CPU)
	case l.MemoryBytes < 0:
		return errdefs.Invalid("memory limit %d: must be >= 0", l.MemoryBytes)
	case l.PidsMax < 0:
		return errdefs.Invalid("pids limit %d: must be >= 0", l.PidsMax)
	}
	return l.Devices.validate()
}

func (l Limits) quotaUs() int64 { return int64(math.Round(l.CPU * cfsPeriodUs)) }

// control is one control-file write.
type control struct {
	path, value string
	optional    bool // a missing file is fine
}

// controlsV1 lists the writes applying l to a fresh v1 group whose
// per-controller directories are dir(ctrl). A fresh group is unlimited, so
// zero limits need no write.
func controlsV1(l Limits, dir func(ctrl string) string) []control {
	var cs []control
	if l.CPU != 0 {
		cs = append(cs, cpuControl(1, l, dir(ctrlCPU)))
	}
	mem := dir(ctrlMemory)
	if l.MemoryBytes != 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		// limit first: memsw must never be below the memory limit.
		cs = append(cs,
			control{path: filepath.Join(mem, "memory.limit_in_bytes"), value: v},
			control{path: filepath.Join(mem, "memory.memsw.limit_in_bytes"), value: v, optional: true})
	}
	cs = append(cs, control{path: filepath.Join(mem, "memory.oom_control"), value: "0"})
	if l.PidsMax != 0 {
		cs = append(cs, control{path: filepath.Join(dir(ctrlPids), "pids.max"), value: strconv.FormatInt(l.PidsMax, 10)})
	}
	return cs
}

// controlsV2 lists the writes applying l to a fresh v2 group at dir.
func controlsV2(l Limits, dir string) []control {
	var cs []control
	if l.CPU != 0 {
		cs = append(cs, cpuControl(2, l, dir))
	}
	if l.MemoryBytes != 0 {
		cs = append(cs,
			control{path: filepath.Join(dir, "memory.max"), value: strconv.FormatInt(l.MemoryBytes, 10)},
			control{path: filepath.Join(dir, "memory.swap.max"), value: "0", optional: true})
	}
	if l.PidsMax != 0 {
		cs = append(cs, control{path: filepath.Join(dir, "pids.max"), value: strconv.FormatInt(l.PidsMax, 10)})
	}
	if l.Idle {
		cs = append(cs, control{path: filepath.Join(dir, "cpu.idle"), value: "1"})
	}
	return cs
}

// cpuControl is the write setting l.CPU in the cpu directory dir of a cgroup
// v1 or v2 group (0: no limit). Every such write walks the host's whole tree
// of CPU cgroups (tg_set_cfs_bandwidth), O(sandboxes); on v1 a fresh group's
// period is the kernel's default (100 ms, which cfsPeriodUs is), so only the
// quota is written.
func cpuControl(version int, l Limits, dir string) control {
	quota := "-1"
	if l.CPU != 0 {
		quota = strconv.FormatInt(l.quotaUs(), 10)
	}
	if version == 2 {
		if l.CPU == 0 {
			quota = "max"
		}
		return control{path: filepath.Join(dir, "cpu.max"), value: quota + " " + strconv.Itoa(cfsPeriodUs)}
	}
	return control{path: filepath.Join(dir, "cpu.cfs_quota_us"), value: quota}
}

// SetCPU sets the group's CPU limit in cores (0: none). A caller may create a
// group without one and set it only when the group first runs work of its
// own: the write costs a walk over every CPU cgroup of the host.
func (g *Group) SetCPU(cores float64) error {
	l := Limits{CPU: cores}
	if err := l.Validate(); err != nil {
		return err
	}
	// held against SetIdle moving the cpu directory (v1)
	g.mu.RLock()
	defer g.mu.RUnlock()
	dir := g.dirs[0]
	if g.h.version != 2 {
		m, ok := g.h.mounts[ctrlCPU]
		if !ok {
			return fmt.Errorf("cgroup %q: no cpu hierarchy", g.name)
		}
		dir = g.h.pathIn(m, g.name, g.idle)
	}
	if err := applyControls([]control{cpuControl(g.h.version, l, dir)}); err != nil {
		return fmt.Errorf("cgroup %q: set cpu limit: %w", g.name, err)
	}
	return nil
}

func applyControls(cs []control) error {
	for _, c := range cs {
		write := writeFile
		if c.optional {
			write = writeOptional
		}
		if err := write(c.path, c.value); err != nil {
			return err
		}
	}
	return nil
}
