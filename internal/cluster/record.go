package cluster

import (
	"time"

	"github.com/dsec-dev/dsec/internal/cluster/placement"
)

// NodeRecord is what an agent publishes about itself: who it is, where its RPC
// listens, what it offers, and its load at ReportedAt.
type NodeRecord struct {
	Name string `json:"name"`
	// Addr is the base URL of the agent's node RPC (http://HOST:PORT).
	Addr     string            `json:"addr"`
	Backends []string          `json:"backends"`
	Labels   map[string]string `json:"labels,omitempty"`
	Hardware []string          `json:"hardware,omitempty"`
	// Capacity is what the agent admits at most (its final say stays local).
	Capacity placement.Resources `json:"capacity"`
	// Load is what its live sandboxes were given.
	Load   placement.Resources `json:"load"`
	Layers []string            `json:"layers,omitempty"`
	// FnCallCapacity is how many FnCalls the node takes at once (0: no bound)
	// and FnCallLoad how many it runs; a node serving FnCall lists the
	// "fncall" backend.
	FnCallCapacity int64     `json:"fncall_capacity,omitempty"`
	FnCallLoad     int64     `json:"fncall_load,omitempty"`
	Version        string    `json:"version,omitempty"`
	StartedAt      time.Time `json:"started_at"`
	ReportedAt     time.Time `json:"reported_at"`
}

// NodeStatus is a node as a Watcher sees it.
type NodeStatus struct {
	NodeRecord
	State placement.State `json:"state"`
	// Draining is the operator's drain flag (State is draining unless lost).
	Draining bool `json:"draining,omitempty"`
	// ObservedAt is when this API server received the node's last report.
	ObservedAt time.Time `json:"observed_at"`
}

// placementNode converts s for the placement engine.
func (s NodeStatus) placementNode() placement.Node {
	return placement.Node{
		Name: s.Name, State: s.State, Backends: s.Backends, Labels: s.Labels, Hardware: s.Hardware,
		Capacity: s.Capacity, Load: s.Load, Layers: s.Layers, ObservedAt: s.ObservedAt,
	}.Clone()
}
