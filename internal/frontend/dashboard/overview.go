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

// Node is one node's capacity and load, and the sandboxes it holds (the
// wire type is api.NodeLoad, which dsec top decodes).
type Node = api.NodeLoad

// SandboxCounts counts sandboxes by state and by backend.
type SandboxCounts = api.SandboxCounts

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
