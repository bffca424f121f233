package v1

import (
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// forkSandbox handles POST /v1/sandboxes/{id}/fork .
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.svc.Fork(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}

// commitSandbox handles POST /v1/sandboxes/{id}/commit .
func (s *Server) commitSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CommitRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.svc.Commit(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}
