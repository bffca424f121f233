package api

// Phases of a pull in flight (PullProgress.Phase) and of each of its layers
// (LayerProgress.Phase).
const (
	// PullResolving: the reference is being resolved to a digest.
	PullResolving = "resolving"
	// PullWaiting: a layer queued behind the pull's other layers.
	PullWaiting = "waiting"
	// PullFetching: bytes are coming from the registry.
	PullFetching = "fetching"
	// PullConverting: the layer (all of it fetched and verified) is being
	// made into dsec's EROFS layer format.
	PullConverting = "converting"
	// PullDone: the layer is on the node (fetched now or before).
	PullDone = "done"
)

// PullProgress is how far a pull of an image by registry reference got on a
// node: each layer's compressed bytes fetched of its size, and its phase.
// Pulls of the same image share one fetch, so each sees the same progress.
type PullProgress struct {
	// Ref is the normalised reference pulled; Digest what it resolved to
	// (empty while resolving).
	Ref    string `json:"ref,omitempty"`
	Digest string `json:"digest,omitempty"`
	// Node is the node pulling (set by a node and a cluster's API server).
	Node string `json:"node,omitempty"`
	// Phase is the least advanced phase of the layers (resolving before
	// the layers are known; done once every layer is on the node).
	Phase string `json:"phase"`
	// FetchedBytes and TotalBytes add up the layers'.
	FetchedBytes int64           `json:"fetched_bytes"`
	TotalBytes   int64           `json:"total_bytes"`
	Layers       []LayerProgress `json:"layers,omitempty"`
}

// LayerProgress is one layer of a PullProgress, in the image's order (base
// first).
type LayerProgress struct {
	Digest       string `json:"digest"`
	Phase        string `json:"phase"`
	FetchedBytes int64  `json:"fetched_bytes"`
	TotalBytes   int64  `json:"total_bytes"`
}

// CreateEvent is one NDJSON line of a streamed create (POST /v1/sandboxes
// with Accept: application/x-ndjson or ?stream=true): "pull" carries the
// progress of the node's fetch of the image (sent when it changes), and the
// last line is "sandbox" (Sandbox) or "error" (Error, with the status a
// plain create would have answered).
type CreateEvent struct {
	Type    string        `json:"type"`
	Pull    *PullProgress `json:"pull,omitempty"`
	Sandbox *Sandbox      `json:"sandbox,omitempty"`
	Error   *Error        `json:"error,omitempty"`
	Status  int           `json:"status,omitempty"`
}

// Types of CreateEvent.
const (
	CreateEventPull    = "pull"
	CreateEventSandbox = "sandbox"
	CreateEventError   = "error"
)
