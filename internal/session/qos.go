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
