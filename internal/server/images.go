package server

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ImageLister describes images and layered environments with their layer
// accounting (internal/agent.Manager). A Node that implements it serves
// GET /v1/images and /v1/images/{name}; others answer not_implemented.
type ImageLister interface {
	Images(ctx context.Context) ([]api.Image, error)
	Image(ctx context.Context, name string) (api.Image, error)
}

func (s *Server) imageLister() (ImageLister, error) {
	if il, ok := s.node.(ImageLister); ok {
		return il, nil
	}
	return nil, errdefs.New(api.CodeNotImplemented, "this node does not describe images")
}

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
