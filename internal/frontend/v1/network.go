package v1

import (
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// setNetwork is PUT /v1/sandboxes/{id}/network.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	var p api.NetworkPolicy
	if err := s.decodeBody(r, &p); err != nil {
		s.writeError(w, r, err)
		return
	}
	sbx, err := s.svc.SetNetwork(r.Context(), r.PathValue("id"), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sbx)
}
