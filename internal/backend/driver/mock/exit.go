package mock

import (
	"context"
	"fmt"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// ExitInit makes sandbox id's init exit, as a container's init that died
// (killed by the OOM killer, a crash): its processes are killed, its
// instance's Done closes, and the sandbox stays on the host, files and all,
// until it is destroyed. It returns once every process is gone.
func (h *Host) ExitInit(ctx context.Context, id string) error {
	h.mu.Lock()
	b := h.boxes[id]
	h.mu.Unlock()
	if b == nil {
		return errdefs.NotFound("mock: sandbox %s", id)
	}
	b.mu.Lock()
	b.closeDone.Do(func() { close(b.done) })
	procs := make([]*hostProc, 0, len(b.running))
	for p := range b.running {
		procs = append(procs, p)
	}
	b.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-ctx.Done():
			return errdefs.Internal(fmt.Errorf("pid %d: %w", p.pid, ctx.Err()), "mock: wait for the processes of an exited init")
		}
	}
	return nil
}
