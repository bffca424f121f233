package v1

import (
	"net/http"
	"strconv"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// screenshot handles GET /v1/sandboxes/{id}/screen : a PNG.
func (s *Server) screenshot(w http.ResponseWriter, r *http.Request) {
	png, err := s.svc.Screenshot(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(png)
}

// sendInput handles POST /v1/sandboxes/{id}/input .
func (s *Server) sendInput(w http.ResponseWriter, r *http.Request) {
	var req api.InputRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	n := 0
	if req.Text != "" {
		n++
	}
	if req.Key != "" {
		n++
	}
	if req.Click != nil {
		n++
	}
	if n != 1 {
		s.writeError(w, r, errdefs.Invalid(`input needs exactly one of "text", "key" or "click"`))
		return
	}
	res, err := s.svc.SendInput(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
