package api

import "time"

// Node states in a cluster.
const (
	NodeReady    = "ready"    // takes new sandboxes
	NodeDraining = "draining" // keeps its sandboxes, takes no new ones
	NodeLost     = "lost"     // its lease expired; its sandboxes answer node_lost
)

// Node is one node of a cluster (GET /v1/nodes).
type Node struct {
	Name     string            `json:"name"`
	Addr     string            `json:"addr"`
	State    string            `json:"state"`
	Backends []string          `json:"backends"`
	Labels   map[string]string `json:"labels,omitempty"`
	// MaxSandboxes is the node's admission limit, Sandboxes how many it holds.
	MaxSandboxes int64 `json:"max_sandboxes"`
	Sandboxes    int64 `json:"sandboxes"`
	// Load is the node's score: its largest utilisation fraction (0..1).
	Load float64 `json:"load"`
	// MaxFnCalls is how many FnCalls the node takes at once (0: no bound) and
	// FnCalls how many it runs, as last reported (nodes with the fncall backend).
	MaxFnCalls int64     `json:"max_fncalls,omitempty"`
	FnCalls    int64     `json:"fncalls,omitempty"`
	Version    string    `json:"version,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	ReportedAt time.Time `json:"reported_at"`
}

// ListNodesResponse is the body of GET /v1/nodes.
type ListNodesResponse struct {
	Nodes []Node `json:"nodes"`
}

// RemoveNodeResponse is the body of DELETE /v1/nodes/{name}: what removing a
// lost node took away.
type RemoveNodeResponse struct {
	Node string `json:"node"`
	// Sandboxes is how many sandboxes the node last reported: they are gone
	// (every call on them answers not_found from now on), and the quota
	// reconciler releases their reservations.
	Sandboxes int64 `json:"sandboxes"`
	// EnvMarks are the environments whose in-use mark by this node was
	// removed (they no longer block `dsec image rm`).
	EnvMarks []string `json:"env_marks"`
	// RequestClaims is how many create request-ID claims held by the node
	// were dropped (a retry of such a create is placed afresh).
	RequestClaims int `json:"request_claims"`
}
