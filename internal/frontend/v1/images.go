package v1

import (
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// The image routes call the service's image group; a service without images
// answers not_implemented.

// composeImage handles POST /v1/images.
func (s *Server) composeImage(w http.ResponseWriter, r *http.Request) {
	var req api.ComposeImageRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	img, err := s.svc.Compose(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, img)
}

// deleteImage handles DELETE /v1/images/{name}.
func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.RemoveImage(r.Context(), r.PathValue("name")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// recordImage handles POST /v1/images/{name}/record.
func (s *Server) recordImage(w http.ResponseWriter, r *http.Request) {
	out, err := s.svc.RecordImage(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// listImages handles GET /v1/images.
func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.svc.Images(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, imgs)
}

// getImage handles GET /v1/images/{name}.
func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	img, err := s.svc.Image(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, img)
}
