package placement

import (
	"context"
	"slices"
	"sync"
	"time"
)

// State is a node's health as the registry reports it.
type State string

const (
	StateReady    State = "ready"    // takes new sandboxes
	StateDraining State = "draining" // keeps its sandboxes, takes no new ones
	StateLost     State = "lost"     // its lease expired
)

// Resources is an amount of the three things placement accounts for. A zero field in
// a capacity means "not limited" and does not count in the node's score.
type Resources struct {
	Sandboxes   int64 `json:"sandboxes"`
	MilliCPU    int64 `json:"milli_cpu"`
	MemoryBytes int64 `json:"memory_bytes"`
}

func (r Resources) add(o Resources) Resources {
	return Resources{r.Sandboxes + o.Sandboxes, r.MilliCPU + o.MilliCPU, r.MemoryBytes + o.MemoryBytes}
}

func (r Resources) sub(o Resources) Resources {
	return Resources{r.Sandboxes - o.Sandboxes, r.MilliCPU - o.MilliCPU, r.MemoryBytes - o.MemoryBytes}
}

// Node is one node as a snapshot shows it.
type Node struct {
	Name     string            `json:"name"`
	State    State             `json:"state"`
	Backends []string          `json:"backends"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Hardware lists what the node offers beyond CPU and memory (e.g. "kvm", "gpu").
	Hardware []string  `json:"hardware,omitempty"`
	Capacity Resources `json:"capacity"`
	// Load is what the node reports as committed: its live sandboxes and the CPU and
	// memory they were given.
	Load Resources `json:"load"`
	// Layers are the digests of the image layers the node has mounted.
	Layers []string `json:"layers,omitempty"`
	// ObservedAt is when Load was measured, in the engine's clock (the watcher
	// stamps it when the node's report arrives, so agents' clock skew does not
	// matter). A confirmed in-flight placement stops counting once a snapshot
	// observed after its confirmation arrives. Zero means "when the snapshot was
	// taken".
	ObservedAt time.Time `json:"observed_at"`
}

// Clone returns a deep copy.
func (n Node) Clone() Node {
	n.Backends = slices.Clone(n.Backends)
	n.Hardware = slices.Clone(n.Hardware)
	n.Layers = slices.Clone(n.Layers)
	if n.Labels != nil {
		l := make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			l[k] = v
		}
		n.Labels = l
	}
	return n
}

// Source delivers cluster snapshots. The cluster's implementation watches the node
// registry in etcd; MemSource serves tests and benchmarks.
type Source interface {
	Snapshot(ctx context.Context) ([]Node, error)
}

// MemSource is an in-memory Source: a list of nodes that tests and simulated agents
// change with Set and Update. Every Snapshot is a deep copy stamped with the time it
// was taken, since a MemSource's loads are current by construction.
type MemSource struct {
	mu    sync.Mutex
	nodes []Node
	index map[string]int
}

// NewMemSource returns a source holding nodes (copied).
func NewMemSource(nodes ...Node) *MemSource {
	s := &MemSource{}
	s.Set(nodes)
	return s
}

// Set replaces all nodes.
func (s *MemSource) Set(nodes []Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = make([]Node, len(nodes))
	s.index = make(map[string]int, len(nodes))
	for i, n := range nodes {
		s.nodes[i] = n.Clone()
		s.index[n.Name] = i
	}
}

// Update calls f on the named node under the source's lock and reports whether the
// node exists. f must not keep n.
func (s *MemSource) Update(name string, f func(n *Node)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[name]
	if ok {
		f(&s.nodes[i])
	}
	return ok
}

// Snapshot implements Source.
func (s *MemSource) Snapshot(ctx context.Context) ([]Node, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]Node, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.Clone()
		out[i].ObservedAt = now
	}
	return out, nil
}
