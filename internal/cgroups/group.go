package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"golang.org/x/sys/unix"
)

// Group is one sandbox's cgroup. It holds no open resources; it is safe for
// concurrent use, though Freeze/Thaw/Kill/Delete of one group should not race
// each other.
type Group struct {
	h    *Hierarchy
	name string
	dirs []string // one per h.mountDirs(), same order
	// idle: on v1 the group's cpu directory lives under the idle parent (a
	// best-effort group, see cpuclass.go); on v2 its own cpu.idle is 1.
	idle bool
	// mu guards idle and the entries of dirs after the first (SetIdle moves
	// the cpu directory; dirs[0], memory's or the unified one, never changes).
	mu sync.RWMutex
	// devDir is the shared v1 devices cgroup the group's processes join
	// (not the group's own: Procs, Kill and Delete ignore it); "" for none.
	devDir string
}

// Name is the group's name as passed to Create or Open.
func (g *Group) Name() string { return g.name }

// Path is the group's directory in the memory hierarchy (v1) or the unified
// hierarchy (v2).
func (g *Group) Path() string { return g.dirs[0] }

// dir is the group's directory for controller ctrl, "" if the controller's
// hierarchy is not mounted (only cpuacct can be missing).
func (g *Group) dir(ctrl string) string {
	if g.h.version == 2 {
		return g.dirs[0]
	}
	m, ok := g.h.mounts[ctrl]
	if !ok {
		return ""
	}
	return g.h.pathIn(m, g.name, g.Idle())
}

// AddProc moves process pid into the group: into every controller's
// cgroup.procs on v1, the one cgroup.procs on v2.
func (g *Group) AddProc(pid int) error {
	s := strconv.Itoa(pid)
	for _, d := range g.paths() {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), s); err != nil {
			return fmt.Errorf("add pid %d to cgroup %q: %w", pid, g.name, err)
		}
	}
	if g.devDir != "" {
		if err := writeFile(filepath.Join(g.devDir, "cgroup.procs"), s); err != nil {
			return fmt.Errorf("add pid %d to the devices cgroup of %q: %w", pid, g.name, err)
		}
	}
	return nil
}

// Dir opens the group's directory (O_RDONLY|O_DIRECTORY|O_CLOEXEC) for
// SysProcAttr{UseCgroupFD: true, CgroupFD: fd}, which starts a child directly
// inside the group (clone3 CLONE_INTO_CGROUP). The caller closes fd (e.g.
// unix.Close) after the child started. On v1, where that does not exist, it
// returns -1 and a not_implemented error.
func (g *Group) Dir() (int, error) {
	if g.h.version != 2 {
		return -1, errdefs.Wrap(api.CodeNotImplemented, errors.ErrUnsupported, "cgroup %q: CLONE_INTO_CGROUP needs cgroup v2", g.name)
	}
	fd, err := openRetry(g.dirs[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %q: %w", g.name, &os.PathError{Op: "open", Path: g.dirs[0], Err: err})
	}
	return fd, nil
}

// Procs returns the sorted PIDs in the group (on v1 the union over all
// controllers, so a process added to only some of them still shows).
func (g *Group) Procs() ([]int, error) {
	var all []int
	for _, d := range g.paths() {
		pids, err := readPids(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			return nil, fmt.Errorf("procs of cgroup %q: %w", g.name, err)
		}
		all = append(all, pids...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// Kill sends SIGKILL to every process in the group. On v2 it writes
// cgroup.kill when the kernel has it (5.14+); otherwise it freezes the group
// (best effort) so nothing can fork meanwhile, signals every listed process
// until no new ones appear, and thaws so the signals are delivered. The
// processes take a moment to exit; Delete waits for that. Killing a group
// that no longer exists succeeds.
func (g *Group) Kill() error {
	if g.h.version == 2 {
		err := writeFile(filepath.Join(g.dirs[0], "cgroup.kill"), "1")
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			if err != nil {
				return fmt.Errorf("kill cgroup %q: %w", g.name, err)
			}
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), killFreezeTimeout)
	defer cancel()
	frozeErr := g.Freeze(ctx)
	signaled := map[int]bool{}
	var killErr error
	for range maxKillRounds {
		pids, err := g.Procs()
		if errors.Is(err, os.ErrNotExist) {
			break // the group is gone, and with it every process in it
		}
		if err != nil {
			killErr = err
			break
		}
		fresh := 0
		for _, pid := range pids {
			if signaled[pid] {
				continue
			}
			fresh++
			signaled[pid] = true
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				killErr = fmt.Errorf("kill pid %d: %w", pid, err)
			}
		}
		if fresh == 0 {
			break
		}
	}
	if frozeErr == nil { // a failed Freeze already thawed
		if err := g.setFrozen(false); err != nil && killErr == nil {
			killErr = err
		}
	}
	if killErr != nil {
		return fmt.Errorf("kill cgroup %q: %w", g.name, killErr)
	}
	return nil
}

const (
	killFreezeTimeout = time.Second
	maxKillRounds     = 100
)

// Delete removes the group's directories (never its parents). A cgroup with
// tasks is EBUSY for a moment after Kill, so it retries until ctx ends, then
// fails with an error wrapping ctx's. A directory already gone is fine.
func (g *Group) Delete(ctx context.Context) error {
	for _, d := range g.paths() {
		err := pollUntil(ctx, func() (bool, error) {
			err := g.h.rmdir(d)
			switch {
			case err == nil || errors.Is(err, unix.ENOENT):
				return true, nil
			case errors.Is(err, unix.EBUSY):
				return false, nil
			default:
				return false, &os.PathError{Op: "rmdir", Path: d, Err: err}
			}
		})
		if err != nil {
			return fmt.Errorf("delete cgroup %q: %w", g.name, err)
		}
	}
	return nil
}

// pollUntil calls done until it reports true or an error, backing off from
// 100µs to 10ms between calls, and fails with ctx's error once ctx ends.
func pollUntil(ctx context.Context, done func() (bool, error)) error {
	wait := 100 * time.Microsecond
	var t *time.Timer
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 10*time.Millisecond)
	}
}
