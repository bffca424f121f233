package dashboard

import (
	"context"
	"net/http"
	"runtime"
	"sort"
	"time"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Overview is the body of GET /ui/api/overview: everything the dashboard's
// first page shows, in one call whatever the number of sandboxes.
type Overview struct {
	GeneratedAt time.Time     `json:"generated_at"`
	Nodes       []Node        `json:"nodes"`
	Sandboxes   SandboxCounts `json:"sandboxes"`
	Rates       *RateSeries   `json:"rates,omitempty"`
	Pools       []Pool        `json:"pools"`
}

// Node is one node's capacity and load, and the sandboxes it holds.
type Node struct {
	Name     string   `json:"name"`
	Version  string   `json:"version,omitempty"`
	Backends []string `json:"backends,omitempty"`
	Cgroup   string   `json:"cgroup,omitempty"`
	// In a cluster (an API server's NodeSource): the node's RPC address, its
	// state (ready, draining, lost), its admission limit and its placement
	// load score (0 idle .. 1 full), as its last report in etcd says.
	Addr         string  `json:"addr,omitempty"`
	State        string  `json:"state,omitempty"`
	MaxSandboxes int64   `json:"max_sandboxes,omitempty"`
	Score        float64 `json:"load_score,omitempty"`
	// Capacity: CPUs and memory of the machine.
	CPUs        int   `json:"cpus"`
	MemoryBytes int64 `json:"memory_bytes"`
	// Load: the 1-minute load average and the memory still available.
	Load1                float64 `json:"load1"`
	MemoryAvailableBytes int64   `json:"memory_available_bytes"`
	// Filled from the sandbox list: how many sandboxes the node holds, how many
	// run, and the CPU and memory limits they add up to.
	Sandboxes            int     `json:"sandboxes"`
	Running              int     `json:"running"`
	CPUAllocated         float64 `json:"cpu_allocated"`
	MemoryAllocatedBytes int64   `json:"memory_allocated_bytes"`
}

// SandboxCounts counts sandboxes by state and by backend.
type SandboxCounts struct {
	Total     int            `json:"total"`
	ByState   map[string]int `json:"by_state"`
	ByBackend map[string]int `json:"by_backend"`
}

// Pool is one FnCall pool (one per image): its run slots and how many run a
// call now.
type Pool struct {
	Image string `json:"image"`
	Slots int    `json:"slots"`
	Busy  int    `json:"busy"`
}

// NodeSource reports the nodes' capacity and load (not their sandbox counts).
// One node reports itself (LocalNodes); a cluster's API server reports every
// node it knows.
type NodeSource interface {
	Nodes(ctx context.Context) ([]Node, error)
}

// LocalNodes is the node this process runs: its Info and the host's CPUs,
// memory and load.
type LocalNodes struct {
	Service session.Service
}

// Nodes implements NodeSource.
func (l LocalNodes) Nodes(ctx context.Context) ([]Node, error) {
	info, err := l.Service.Info(ctx)
	if err != nil {
		return nil, err
	}
	n := Node{Name: info.Node, Version: info.Version, Backends: info.Backends, Cgroup: info.Cgroup, CPUs: runtime.NumCPU()}
	n.MemoryBytes, n.MemoryAvailableBytes = hostMemory()
	n.Load1 = hostLoad1()
	return []Node{n}, nil
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ov, err := h.buildOverview(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ov)
}

func (h *Handler) buildOverview(ctx context.Context) (Overview, error) {
	nodes, err := h.opts.Nodes.Nodes(ctx)
	if err != nil {
		return Overview{}, err
	}
	list, err := h.opts.Service.List(ctx)
	if err != nil {
		return Overview{}, err
	}
	ov := Overview{GeneratedAt: time.Now().UTC(), Nodes: nodes, Pools: []Pool{},
		Sandboxes: countSandboxes(list, nodes)}
	if h.opts.Rates != nil {
		s := h.opts.Rates.Snapshot()
		ov.Rates = &s
	}
	if h.opts.Pools != nil {
		ov.Pools = append(ov.Pools, h.opts.Pools()...)
	}
	sort.Slice(ov.Nodes, func(i, j int) bool { return ov.Nodes[i].Name < ov.Nodes[j].Name })
	return ov, nil
}

// countSandboxes counts list by state and backend and adds each sandbox to the
// node its ID names (to the only node when it names none).
func countSandboxes(list []api.Sandbox, nodes []Node) SandboxCounts {
	c := SandboxCounts{Total: len(list), ByState: map[string]int{}, ByBackend: map[string]int{}}
	byName := make(map[string]*Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	for i := range list {
		sb := &list[i]
		c.ByState[sb.State]++
		c.ByBackend[sb.Backend]++
		name, _ := session.NodeOf(sb.ID)
		n := byName[name]
		if n == nil && len(nodes) == 1 {
			n = &nodes[0]
		}
		if n == nil {
			continue
		}
		n.Sandboxes++
		if sb.State == api.StateRunning {
			n.Running++
			n.CPUAllocated += sb.CPU
			n.MemoryAllocatedBytes += sb.MemoryBytes
		}
	}
	return c
}
