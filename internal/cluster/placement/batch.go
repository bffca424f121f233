package placement

import (
	"context"
	"fmt"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// MaxBatch bounds PlaceBatch's n.
const MaxBatch = 1 << 20

// PlaceBatch places n sandboxes of the same request in one call, all or nothing:
// either n decisions, each charged in flight, or an error and no charge left behind.
// The engine is locked for the whole batch, so the batch sees one consistent view.
// Each decision is then admitted, confirmed, rejected or released on its own.
func (e *Engine) PlaceBatch(ctx context.Context, req Request, n int) ([]*Decision, error) {
	if n <= 0 || n > MaxBatch {
		return nil, errdefs.Invalid("placement: batch size %d out of range 1..%d", n, MaxBatch)
	}
	if err := req.check(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Decision, 0, n)
	for i := 0; i < n; i++ {
		d, err := e.placeLocked(req, 1, nil)
		if err != nil {
			for _, p := range out {
				e.releaseLocked(p.ID)
			}
			e.placements.Add(-int64(len(out)))
			return nil, fmt.Errorf("placement: batch of %d: only %d fit, none placed: %w", n, i, err)
		}
		out = append(out, d)
	}
	return out, nil
}
