package v1

import (
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// exec handles POST /v1/sandboxes/{id}/exec: the command's own failure (a non-zero
// exit, a timeout, a start error) is part of the 200 result, not an API error.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	req, err := s.decodeExec(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.answerLate(w, r, func() (any, error) { return s.svc.Exec(r.Context(), r.PathValue("id"), req) })
}

// decodeExec decodes and validates an ExecRequest body.
func (s *Server) decodeExec(r *http.Request) (api.ExecRequest, error) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		return api.ExecRequest{}, tooLarge(s.opts.MaxBodyBytes)
	}
	return decodeExecRequest(r.Body, s.opts.MaxBodyBytes)
}
