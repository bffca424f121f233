package server

import (
	"net/http"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// imageManager and imageLister are the service's image group (not_implemented
// where the service has no images).
func (s *Server) imageManager() (session.Images, error) { return s.svc, nil }

// composeImage handles POST /v1/images.
func (s *Server) composeImage(w http.ResponseWriter, r *http.Request) {
	var req api.ComposeImageRequest
	im, err := s.imageManager()
	if err == nil {
		err = s.decodeBody(r, &req)
	}
	if err == nil {
		var img api.Image
		if img, err = im.Compose(r.Context(), req); err == nil {
			writeJSON(w, http.StatusCreated, img)
			return
		}
	}
	s.writeError(w, r, err)
}

// deleteImage handles DELETE /v1/images/{name}.
func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) {
	im, err := s.imageManager()
	if err == nil {
		if err = im.RemoveImage(r.Context(), r.PathValue("name")); err == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	s.writeError(w, r, err)
}

// recordImage handles POST /v1/images/{name}/record.
func (s *Server) recordImage(w http.ResponseWriter, r *http.Request) {
	im, err := s.imageManager()
	if err == nil {
		var out []api.RecordedLayer
		if out, err = im.RecordImage(r.Context(), r.PathValue("name")); err == nil {
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) imageLister() (session.Images, error) { return s.svc, nil }

// listImages handles GET /v1/images.
func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	il, err := s.imageLister()
	if err == nil {
		var imgs []api.Image
		if imgs, err = il.Images(r.Context()); err == nil {
			writeJSON(w, http.StatusOK, imgs)
			return
		}
	}
	s.writeError(w, r, err)
}

// getImage handles GET /v1/images/{name}.
func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	il, err := s.imageLister()
	if err == nil {
		var img api.Image
		if img, err = il.Image(r.Context(), r.PathValue("name")); err == nil {
			writeJSON(w, http.StatusOK, img)
			return
		}
	}
	s.writeError(w, r, err)
}
