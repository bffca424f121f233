package api

// What happens to a sandbox at its deadline (DeadlineRequest.OnExpiry,
// CreateSandboxRequest.OnExpiry, Sandbox.OnExpiry).
const (
	ExpiryDelete = "delete" // the sandbox is deleted (the default)
	ExpiryPause  = "pause"  // the sandbox is paused; a paused sandbox has no deadline
	// ExpiryPauseFilesystem pauses the sandbox without memory
	// (PauseRequest.Memory false); a backend without that refuses it.
	ExpiryPauseFilesystem = "pause_filesystem"
)

// MaxTimeoutSeconds bounds a deadline (TTLSeconds, DeadlineRequest): one year.
const MaxTimeoutSeconds = 365 * 24 * 3600

// DeadlineRequest is the body of PUT /v1/sandboxes/{id}/deadline: it moves the
// sandbox's deadline (its mutable TTL), which its node keeps and enforces.
type DeadlineRequest struct {
	// TimeoutSeconds puts the deadline this long from now; 0 removes it.
	TimeoutSeconds int64 `json:"timeout_seconds"`
	// OnExpiry is what happens at the deadline: "delete" (the default),
	// "pause" or "pause_filesystem".
	OnExpiry string `json:"on_expiry,omitempty"`
	// ExtendOnly keeps a later deadline the sandbox already has (the deadline
	// only ever moves later).
	ExtendOnly bool `json:"extend_only,omitempty"`
}
