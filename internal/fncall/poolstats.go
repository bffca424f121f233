package fncall

import "sort"

// PoolStat is one image's pool: its zygotes, its run slots and how many of
// them run a call now.
type PoolStat struct {
	Image   string
	Zygotes int
	Slots   int
	Busy    int
}

// Pools reports the started pools, by image name.
func (e *Engine) Pools() []PoolStat {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]PoolStat, 0, len(e.pools))
	for name, p := range e.pools {
		out = append(out, PoolStat{Image: name, Zygotes: len(p.zs), Slots: len(p.slots), Busy: len(p.slots) - len(p.free)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Image < out[j].Image })
	return out
}
