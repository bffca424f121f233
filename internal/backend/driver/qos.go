package driver

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// CPUClasser is implemented by instances whose CPU class (api.CPUClassLS,
// api.CPUClassBE) can change while they run (Spec.CPUClass sets the first).
type CPUClasser interface {
	SetCPUClass(ctx context.Context, class string) error
}

// Reclaimer is implemented by instances whose memory can be pushed out of RAM
// while they are paused and brought back before they resume.
type Reclaimer interface {
	// Reclaim pushes the frozen sandbox's memory out (into swap when the host
	// has it, else page cache only) and says what moved.
	Reclaim(ctx context.Context) (api.ReclaimResult, error)
	// Prefetch brings swapped memory back; called before the thaw.
	Prefetch(ctx context.Context) error
	// PageOutCold pages out memory of a running sandbox that the kernel
	// considers cold (idle reclaim; MADV_COLD then MADV_PAGEOUT) and returns
	// the bytes advised.
	PageOutCold(ctx context.Context) (int64, error)
	// Pids lists the sandbox's host PIDs (DAMON targets).
	Pids() ([]int, error)
}
