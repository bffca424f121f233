package v1

import (
	"context"
	"fmt"
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Batch create limits.
const (
	// MaxBatch bounds the sandboxes of one POST /v1/sandboxes:batch.
	MaxBatch = 100_000
	// maxBatchBody bounds its body (about 600 bytes per sandbox).
	maxBatchBody = 64 << 20
	// createBatchParallel bounds the creates a service without CreateBatch runs at once.
	createBatchParallel = 16
)

// createBatch handles POST /v1/sandboxes:batch: every sandbox or none. Each
// request should carry its own request_id; a retried batch then returns the same
// sandboxes and creates nothing twice.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request) {
	var req api.BatchCreateRequest
	if r.ContentLength > maxBatchBody {
		s.writeError(w, r, tooLarge(maxBatchBody))
		return
	}
	if err := decodeJSON(r.Body, maxBatchBody, &req); err != nil {
		s.writeError(w, r, fmt.Errorf("decoding %s body: %w", r.URL.Path, err))
		return
	}
	if err := validateBatch(req.Sandboxes); err != nil {
		s.writeError(w, r, err)
		return
	}
	var out []api.Sandbox
	var err error
	out, err = s.svc.CreateBatch(r.Context(), req.Sandboxes)
	if errdefs.Is(err, api.CodeNotImplemented) { // a service that creates one at a time
		out, err = createEach(r.Context(), s.svc, req.Sandboxes)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.BatchCreateResponse{Sandboxes: out})
}

// validateBatch checks the size, each request, and that no request ID repeats.
func validateBatch(reqs []api.CreateSandboxRequest) error {
	if len(reqs) == 0 || len(reqs) > MaxBatch {
		return errdefs.Invalid("a batch holds 1..%d sandboxes, not %d", MaxBatch, len(reqs))
	}
	seen := make(map[string]int, len(reqs))
	for i := range reqs {
		if err := session.ValidateCreate(reqs[i]); err != nil {
			return fmt.Errorf("sandboxes[%d]: %w", i, err)
		}
		if id := reqs[i].RequestID; id != "" {
			if j, dup := seen[id]; dup {
				return errdefs.Invalid("sandboxes[%d] and sandboxes[%d] share request_id %q", j, i, id)
			}
			seen[id] = i
		}
	}
	return nil
}

// createEach creates reqs one by one with bounded parallelism, every one or
// none (session.CreateEach).
func createEach(ctx context.Context, svc session.Service, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	return session.CreateEach(ctx, len(reqs), createBatchParallel,
		func(ctx context.Context, i int) (api.Sandbox, error) { return svc.Create(ctx, reqs[i]) }, svc.Delete, nil)
}
