package session

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// QoS is implemented by services that manage CPU classes and memory reclaim
// (the node agent). Front ends find it by type assertion; a Service without it
// answers those operations with not_implemented.
type QoS interface {
	// PauseWith pauses; with req.Reclaim it pushes the frozen sandbox's memory
	// out and says what moved.
	PauseWith(ctx context.Context, id string, req api.PauseRequest) (api.PauseResponse, error)
	// SetCPUClass changes a sandbox's CPU class (api.CPUClassLS, api.CPUClassBE).
	SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error)
}

// UsageReader is implemented by services that read their sandboxes' CPU and
// memory use (the node agent; in a cluster the router, which asks the owning
// nodes). Front ends find it by type assertion.
type UsageReader interface {
	// SandboxUsage returns the use of the sandboxes ids (unknown IDs are left
	// out), or of every sandbox when ids is empty. It must not wait for a
	// sandbox a long operation holds (it reports what it last read).
	SandboxUsage(ctx context.Context, ids []string) ([]api.SandboxUsage, error)
}
