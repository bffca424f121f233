package cgroups

import (
	"context"
	"fmt"
	"path/filepath"
)

// v1 freezer.state values.
const (
	stateFrozen = "FROZEN"
	stateThawed = "THAWED"
)

// v1 rewrites FROZEN every this many polls: a v1 freeze can stall in
// FREEZING while tasks are forking, and a rewrite retries the stragglers.
const refreezeEvery = 16

// Freeze stops every process in the group and waits until the kernel reports
// the group frozen (v1 freezer.state FROZEN, v2 cgroup.events "frozen 1").
// If ctx ends first the group is thawed again and the error wraps ctx's.
func (g *Group) Freeze(ctx context.Context) error {
	if err := g.setFrozen(true); err != nil {
		return err
	}
	polls := 0
	err := pollUntil(ctx, func() (bool, error) {
		polls++
		if g.h.version == 1 && polls%refreezeEvery == 0 {
			if err := g.setFrozen(true); err != nil {
				return false, err
			}
		}
		return g.Frozen()
	})
	if err != nil {
		_ = g.setFrozen(false) // do not leave the group half frozen
		return fmt.Errorf("freeze cgroup %q: %w", g.name, err)
	}
	return nil
}

// Thaw resumes the group's processes and waits until the kernel reports the
// group thawed or ctx ends.
func (g *Group) Thaw(ctx context.Context) error {
	if err := g.setFrozen(false); err != nil {
		return err
	}
	err := pollUntil(ctx, func() (bool, error) {
		frozen, err := g.Frozen()
		return !frozen, err
	})
	if err != nil {
		return fmt.Errorf("thaw cgroup %q: %w", g.name, err)
	}
	return nil
}

// setFrozen requests the frozen or thawed state without waiting.
func (g *Group) setFrozen(frozen bool) error {
	var path, v string
	if g.h.version == 2 {
		path, v = filepath.Join(g.dirs[0], "cgroup.freeze"), "0"
		if frozen {
			v = "1"
		}
	} else {
		path, v = filepath.Join(g.dir(ctrlFreezer), "freezer.state"), stateThawed
		if frozen {
			v = stateFrozen
		}
	}
	if err := writeFile(path, v); err != nil {
		return fmt.Errorf("freeze cgroup %q: %w", g.name, err)
	}
	return nil
}

// Frozen reports whether the kernel considers the group completely frozen;
// a group still FREEZING (v1) or not yet "frozen 1" (v2) is not.
func (g *Group) Frozen() (bool, error) {
	if g.h.version == 2 {
		n, err := readKey(filepath.Join(g.dirs[0], "cgroup.events"), "frozen")
		if err != nil {
			return false, fmt.Errorf("cgroup %q: %w", g.name, err)
		}
		return n == 1, nil
	}
	s, err := readString(filepath.Join(g.dir(ctrlFreezer), "freezer.state"))
	if err != nil {
		return false, fmt.Errorf("cgroup %q: %w", g.name, err)
	}
	return s == stateFrozen, nil
}
