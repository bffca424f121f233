package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Create makes the group name with limits l: it creates missing parent
// directories (on v2 also enabling the cpu, memory and pids controllers in
// every ancestor's cgroup.subtree_control), the group itself in every
// controller, and writes the limits. An existing group is an already_exists
// error. On failure everything Create made is removed again.
func (h *Hierarchy) Create(name string, l Limits) (g *Group, err error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	var made []string // directories to remove on failure, in creation order
	defer func() {
		if err != nil {
			for _, d := range slices.Backward(made) {
				_ = h.rmdir(d) // best effort: a sibling may have appeared
			}
		}
	}()
	g = h.groupClass(name, l.Idle)
	for _, m := range h.mountDirs() {
		if made, err = h.mkParents(m, name, made); err != nil {
			return nil, fmt.Errorf("create cgroup %q: %w", name, err)
		}
	}
	if made, err = h.mkIdleParent(name, l.Idle, made); err != nil {
		return nil, fmt.Errorf("create cgroup %q: %w", name, err)
	}
	for _, d := range g.dirs {
		if err = h.mkdir(d); err != nil {
			if errors.Is(err, os.ErrExist) {
				return nil, errdefs.Wrap(api.CodeAlreadyExists, err, "create cgroup %q", name)
			}
			return nil, fmt.Errorf("create cgroup %q: %w", name, err)
		}
		made = append(made, d)
	}
	var cs []control
	if h.version == 2 {
		cs = controlsV2(l, g.dirs[0])
		if l.Devices.Restrict {
			if err = h.attachDevices(l.Devices, g.dirs[0]); err != nil {
				return nil, fmt.Errorf("create cgroup %q: %w", name, err)
			}
		}
	} else {
		if l.Devices.Restrict {
			if g.devDir, err = h.sharedDevices(name, l.Devices); err != nil {
				return nil, fmt.Errorf("create cgroup %q: %w", name, err)
			}
		}
		cs = controlsV1(l, g.dir)
	}
	if err = applyControls(cs); err != nil {
		return nil, fmt.Errorf("create cgroup %q: set limits: %w", name, err)
	}
	return g, nil
}

// mkParents creates the missing ancestors of name under mount m, appending
// each directory it creates to made. On v2 it then enables h.enable in the
// subtree_control of every ancestor from m down, skipping ones done before.
func (h *Hierarchy) mkParents(m, name string, made []string) ([]string, error) {
	rel := filepath.Join(h.parent, filepath.Dir(name))
	chain := []string{m}
	if rel != "." {
		dir := m
		for part := range strings.SplitSeq(rel, "/") {
			dir = filepath.Join(dir, part)
			chain = append(chain, dir)
		}
	}
	for _, dir := range chain[1:] {
		err := h.mkdir(dir)
		switch {
		case err == nil:
			made = append(made, dir)
			h.enabled.Delete(dir) // a new directory has nothing enabled
		case !errors.Is(err, os.ErrExist):
			return made, err
		}
	}
	if h.version != 2 || h.enable == "" {
		return made, nil
	}
	for _, dir := range chain {
		if _, ok := h.enabled.Load(dir); ok {
			continue
		}
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), h.enable); err != nil {
			return made, fmt.Errorf("enable controllers: %w", err)
		}
		h.enabled.Store(dir, true)
	}
	return made, nil
}

// Open returns the existing group name, e.g. to re-adopt it after an agent
// restart. It is a not_found error when the group exists in no controller; a
// group only partly present (an interrupted Create) opens so it can be
// deleted.
func (h *Hierarchy) Open(name string) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	g := h.groupClass(name, h.isIdle(name))
	for _, d := range g.dirs {
		if _, err := os.Stat(d); err == nil {
			return g, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open cgroup %q: %w", name, err)
		}
	}
	return nil, errdefs.NotFound("cgroup %q not found", name)
}

func (h *Hierarchy) group(name string) *Group { return h.groupClass(name, false) }

func (h *Hierarchy) groupClass(name string, idle bool) *Group {
	g := &Group{h: h, name: name, idle: idle}
	for _, m := range h.mountDirs() {
		g.dirs = append(g.dirs, h.pathIn(m, name, idle))
	}
	return g
}
