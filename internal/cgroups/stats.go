package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// OOMKills is how many processes the kernel's OOM killer killed in the group
// because of its memory limit (v1 memory.oom_control, v2 memory.events
// "oom_kill").
func (g *Group) OOMKills() (uint64, error) {
	path := filepath.Join(g.dir(ctrlMemory), "memory.oom_control")
	if g.h.version == 2 {
		path = filepath.Join(g.dirs[0], "memory.events")
	}
	n, err := readKey(path, "oom_kill")
	if err != nil {
		return 0, fmt.Errorf("oom kills of cgroup %q: %w", g.name, err)
	}
	return n, nil
}

// MemoryUsage is the group's current memory charge in bytes (v1
// memory.usage_in_bytes, v2 memory.current).
func (g *Group) MemoryUsage() (int64, error) {
	return g.readMemory("memory.usage_in_bytes", "memory.current")
}

// MemoryPeak is the group's highest memory charge in bytes (v1
// memory.max_usage_in_bytes, v2 memory.peak, which kernels before 5.19 lack:
// then a not_implemented error).
func (g *Group) MemoryPeak() (int64, error) {
	return g.readMemory("memory.max_usage_in_bytes", "memory.peak")
}

func (g *Group) readMemory(v1File, v2File string) (int64, error) {
	path := filepath.Join(g.dir(ctrlMemory), v1File)
	if g.h.version == 2 {
		path = filepath.Join(g.dirs[0], v2File)
	}
	n, err := readInt(path)
	if err != nil {
		if g.h.version == 2 && errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(g.dirs[0]); serr == nil {
				return 0, errdefs.Wrap(api.CodeNotImplemented, err, "cgroup %q: %s unsupported by this kernel", g.name, v2File)
			}
		}
		return 0, fmt.Errorf("memory of cgroup %q: %w", g.name, err)
	}
	return n, nil
}

// CPUUsage is the total CPU time the group's tasks consumed (v1 cpuacct.usage,
// v2 cpu.stat usage_usec). On v1 without a cpuacct hierarchy it is a
// not_implemented error.
func (g *Group) CPUUsage() (time.Duration, error) {
	if g.h.version == 2 {
		us, err := readKey(filepath.Join(g.dirs[0], "cpu.stat"), "usage_usec")
		if err != nil {
			return 0, fmt.Errorf("cpu usage of cgroup %q: %w", g.name, err)
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	d := g.dir(ctrlCPUAcct)
	if d == "" {
		return 0, errdefs.Wrap(api.CodeNotImplemented, errors.ErrUnsupported, "cpu usage of cgroup %q: no cpuacct hierarchy", g.name)
	}
	ns, err := readInt(filepath.Join(d, "cpuacct.usage"))
	if err != nil {
		return 0, fmt.Errorf("cpu usage of cgroup %q: %w", g.name, err)
	}
	return time.Duration(ns), nil
}
