package server

import (
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// setNetwork is PUT /v1/sandboxes/{id}/network.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	n, ok := s.svc.(session.Networker)
	if !ok {
		s.writeError(w, r, errdefs.New(api.CodeNotImplemented, "this node offers no network policy"))
		return
	}
	var p api.NetworkPolicy
	if err := s.decodeBody(r, &p); err != nil {
		s.writeError(w, r, err)
		return
	}
	sbx, err := n.SetNetwork(r.Context(), r.PathValue("id"), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sbx)
}
