package api

import (
	"encoding/json"
	"time"
)

// Trajectory headers. A session operation (blocking exec, exec/stream, file read,
// write, archive upload, mkdir, remove, background process start, HTTP proxy) that
// carries both TrajectoryHeader and StepHeader is a step of that trajectory: it is
// logged durably, and a re-issued step is answered from the log (ReplayedHeader:
// true) without touching the sandbox.
const (
	TrajectoryHeader = "X-Dsec-Trajectory" // trajectory ID: 1-128 of [A-Za-z0-9._:-]
	StepHeader       = "X-Dsec-Step"       // step number, 1, 2, ... in order
	ReplayedHeader   = "X-Dsec-Replayed"   // "true" on answers taken from the log
)

// Trajectory step states.
const (
	StepStarted  = "started"  // running now
	StepFinished = "finished" // its result is logged
	StepUnknown  = "unknown"  // started, but the server stopped before it finished
)

// Trajectory describes a logged trajectory.
type Trajectory struct {
	ID string `json:"id"`
	// SandboxID is the sandbox live steps run in; Sandboxes lists every sandbox the
	// trajectory was bound to, oldest first (a rebuild appends one).
	SandboxID string   `json:"sandbox_id"`
	Sandboxes []string `json:"sandboxes"`
	// Create holds the parameters of the first sandbox, used by a rebuild.
	Create    CreateSandboxRequest `json:"create"`
	CreatedAt time.Time            `json:"created_at"`
	UpdatedAt time.Time            `json:"updated_at"`
	// LastStep is the highest step number logged; StepCount the number of steps.
	LastStep  int `json:"last_step"`
	StepCount int `json:"step_count"`
	Rebuilds  int `json:"rebuilds,omitempty"`
	// Replays counts re-issued steps answered from the log (nothing ran);
	// Divergences the re-issued steps refused as trajectory_diverged.
	Replays     int `json:"replays"`
	Divergences int `json:"divergences"`
	// Steps is filled by GET /v1/trajectories/{id}.
	Steps []TrajectoryStep `json:"steps,omitempty"`
}

// TrajectoryStep is one logged step (and one line of the JSON-lines export).
type TrajectoryStep struct {
	Trajectory  string          `json:"trajectory"`
	Step        int             `json:"step"`
	Op          string          `json:"op"`          // exec, exec_stream, start_process, write_file, upload_archive, read_file, mkdir, remove, http
	Fingerprint string          `json:"fingerprint"` // sha256 of the op and its normalised arguments
	Args        json.RawMessage `json:"args"`        // the normalised arguments (bodies by sha256)
	SandboxID   string          `json:"sandbox_id"`
	State       string          `json:"state"`
	StartedAt   time.Time       `json:"started_at"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
	DurationMs  float64         `json:"duration_ms,omitempty"`
	// Status is the HTTP status of the logged answer.
	Status int `json:"status,omitempty"`
	// Result is the answer when it is JSON (an exec result, a process, a file info,
	// an error body); Body holds any other answer (file bytes, NDJSON events of
	// exec/stream, an HTTP response body), base64 in JSON.
	Result     json.RawMessage   `json:"result,omitempty"`
	Body       []byte            `json:"body,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	BodySize   int64             `json:"body_size,omitempty"`
	BodySHA256 string            `json:"body_sha256,omitempty"`
	// Truncated says the answer was over the log's cap: only its hash is kept and
	// the step cannot be replayed.
	Truncated bool `json:"truncated,omitempty"`
}

// ListTrajectoriesResponse is the body of GET /v1/trajectories.
type ListTrajectoriesResponse struct {
	Trajectories []Trajectory `json:"trajectories"`
}

// RebuildResponse is the answer of POST /v1/trajectories/{id}/rebuild.
type RebuildResponse struct {
	Trajectory string        `json:"trajectory"`
	OldSandbox string        `json:"old_sandbox_id"`
	SandboxID  string        `json:"sandbox_id"`
	Steps      []RebuiltStep `json:"steps"`
	// Reexecuted counts the steps run again; Mismatched those whose new result
	// differs from the logged one.
	Reexecuted int `json:"reexecuted"`
	Mismatched int `json:"mismatched"`
}

// RebuiltStep says what a rebuild did with one logged step.
type RebuiltStep struct {
	Step int    `json:"step"`
	Op   string `json:"op"`
	// Action is "reexecuted" or "skipped" (reads, HTTP, steps of unknown outcome).
	Action string `json:"action"`
	// Matched says the new result equals the logged one (exec: exit code, stdout
	// and stderr; other operations: the status).
	Matched bool   `json:"matched"`
	Detail  string `json:"detail,omitempty"`
}
