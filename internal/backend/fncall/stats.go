package fncall

// PoolStats is one warm pool's occupancy: its image, its slots (concurrent runs
// it can hold) and how many of them are busy (running a call, or being reaped
// and reset just after one).
type PoolStats struct {
	Image string
	Slots int
	Busy  int
}

// Pools returns the occupancy of every started pool (metrics read it at scrape
// time). Pools start on first use, so a node that ran no FnCall has none.
func (e *Engine) Pools() []PoolStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]PoolStats, 0, len(e.pools))
	for _, p := range e.pools {
		n := cap(p.free)
		out = append(out, PoolStats{Image: p.image, Slots: n, Busy: n - len(p.free)})
	}
	return out
}
