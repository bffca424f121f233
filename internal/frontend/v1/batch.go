package v1

import (
	"fmt"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Batch create limits.
const (
	// MaxBatch bounds the sandboxes of one POST /v1/sandboxes:batch.
	MaxBatch = api.MaxBatch
	// maxBatchBody bounds its body (about 600 bytes per sandbox).
	maxBatchBody = 64 << 20
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
	// The chain's validating interceptor checks the batch and creates it one
	// by one when the service has no CreateBatch (session.Validating).
	out, err := s.svc.CreateBatch(r.Context(), req.Sandboxes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.BatchCreateResponse{Sandboxes: out})
}
