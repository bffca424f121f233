package v1

import (
	"errors"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// pauseSandbox serves POST .../pause with an optional body {"reclaim": true}
// or {"memory": false} (a filesystem-only pause, api.PauseRequest.Memory).
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.PauseRequest
	if r.ContentLength != 0 {
		if err := s.decodeBody(r, &req); err != nil && !(r.ContentLength < 0 && isEmptyBody(err)) {
			s.writeError(w, r, err)
			return
		}
	}
	if !req.Reclaim && (req.Memory == nil || *req.Memory) {
		s.sandboxOp(w, r, s.svc.Pause)
		return
	}
	res, err := s.svc.PauseWith(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// setCPUClass serves PUT .../cpu-class {"cpu_class": "ls"|"be"}.
func (s *Server) setCPUClass(w http.ResponseWriter, r *http.Request) {
	var req api.SetCPUClassRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	sbx, err := s.svc.SetCPUClass(r.Context(), r.PathValue("id"), req.CPUClass)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sbx)
}

// setDeadline serves PUT .../deadline (api.DeadlineRequest).
func (s *Server) setDeadline(w http.ResponseWriter, r *http.Request) {
	var req api.DeadlineRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	sbx, err := s.svc.SetDeadline(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sbx)
}

// isEmptyBody reports a chunked body that turned out empty (a bodiless pause).
func isEmptyBody(err error) bool { return errors.Is(err, errEmptyBody) }
