package api

import "time"

// DefaultProject is the admin project: the cluster's first token (DATA_DIR/token)
// belongs to it, and only its tokens may administer projects.
const DefaultProject = "default"

// LabelProject is the label every sandbox carries with its project's name (set
// by the API tier; a caller's own value is replaced). LabelReservation names the
// quota reservation the sandbox was counted under.
const (
	LabelProject     = "dsec.project"
	LabelReservation = "dsec.reservation"
)

// Quota limits a project's live sandboxes; a zero field is unlimited.
type Quota struct {
	// MaxSandboxes bounds the number of live sandboxes.
	MaxSandboxes int64 `json:"max_sandboxes,omitempty"`
	// CPU bounds the sum of the sandboxes' CPU limits, in cores as in
	// CreateSandboxRequest.CPU (a create without cpu counts 1).
	CPU float64 `json:"cpu,omitempty"`
	// MemoryBytes bounds the sum of their memory limits (a create without
	// memory_bytes counts 512 MiB).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// Usage is what a project's live sandboxes (and creates in flight) hold.
type Usage struct {
	Sandboxes   int64   `json:"sandboxes"`
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
}

// ProjectToken describes one of a project's API tokens (never the token
// itself: only its digest is stored).
type ProjectToken struct {
	// ID is the first 12 hex digits of the token's SHA-256 digest (what
	// DELETE /v1/projects/{name}/tokens/{id} takes).
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// Project is the body of GET /v1/projects/{name}.
type Project struct {
	Name  string `json:"name"`
	Quota Quota  `json:"quota"`
	// Usage is counted only while the project has a quota (a project without
	// limits reserves nothing per create).
	Usage     Usage          `json:"usage"`
	Tokens    []ProjectToken `json:"tokens"`
	CreatedAt time.Time      `json:"created_at,omitzero"`
	// Registries are the registry hosts the project holds credentials for
	// (PUT /v1/projects/{name}/registries/{host}), sorted; the credentials
	// themselves are never shown.
	Registries []string `json:"registries,omitempty"`
}

// CreateProjectRequest is the body of POST /v1/projects.
type CreateProjectRequest struct {
	Name  string `json:"name"`
	Quota Quota  `json:"quota"`
}

// ProjectTokenResponse is the answer to POST /v1/projects and POST
// /v1/projects/{name}/tokens: the new token, shown this once.
type ProjectTokenResponse struct {
	Project Project `json:"project"`
	Token   string  `json:"token"`
	TokenID string  `json:"token_id"`
}

// ListProjectsResponse is the body of GET /v1/projects.
type ListProjectsResponse struct {
	Projects []Project `json:"projects"`
}
