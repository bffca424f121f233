package server

import (
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// forkSandbox handles POST /v1/sandboxes/{id}/fork (session.Forker).
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) {
	f, ok := s.svc.(session.Forker)
	if !ok {
		s.writeError(w, r, errdefs.New(api.CodeNotImplemented, "this server cannot fork sandboxes"))
		return
	}
	var req api.ForkRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := f.Fork(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}

// commitSandbox handles POST /v1/sandboxes/{id}/commit (session.Committer).
func (s *Server) commitSandbox(w http.ResponseWriter, r *http.Request) {
	c, ok := s.svc.(session.Committer)
	if !ok {
		s.writeError(w, r, errdefs.New(api.CodeNotImplemented, "this server cannot commit sandboxes"))
		return
	}
	var req api.CommitRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := c.Commit(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}
