package api

import "time"

// NodeLoad is one node's capacity and load, and the sandboxes it holds (the
// dashboard's GET /ui/api/overview and /ui/api/top, dsec top).
type NodeLoad struct {
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

// TopUsage is one sandbox's resource use (GET /ui/api/usage and /ui/api/top):
// what its node read, plus CPUPercent, the share of one core since this
// handler's previous read of the sandbox (absent on the first).
type TopUsage struct {
	SandboxUsage
	CPUPercent *float64 `json:"cpu_percent,omitempty"`
}

// Top is the body of GET /ui/api/top: the nodes and the busiest sandboxes.
type Top struct {
	GeneratedAt time.Time     `json:"generated_at"`
	Nodes       []NodeLoad    `json:"nodes"`
	Sandboxes   SandboxCounts `json:"sandboxes"`
	// Busiest holds at most limit sandboxes, by CPU (then memory) or by memory.
	Busiest []TopUsage `json:"busiest"`
	SortBy  string     `json:"sort"`
}
