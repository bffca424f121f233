package server

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ImageLister describes images and layered environments with their layer
// accounting (internal/agent.Manager), for GET /v1/images and /v1/images/{name}.
type ImageLister interface {
	Images(ctx context.Context) ([]api.Image, error)
	Image(ctx context.Context, name string) (api.Image, error)
}

// ImageManager composes, removes and records environments on the node
// (internal/app/node's node), for POST /v1/images, DELETE /v1/images/{name} and
// POST /v1/images/{name}/record.
type ImageManager interface {
	Compose(ctx context.Context, req api.ComposeImageRequest) (api.Image, error)
	RemoveImage(ctx context.Context, name string) error
	RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error)
}

func (s *Server) imageManager() (ImageManager, error) {
	if s.opts.ImageManager != nil {
		return s.opts.ImageManager, nil
	}
	return nil, errdefs.New(api.CodeNotImplemented, "this node does not manage environments")
}

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

func (s *Server) imageLister() (ImageLister, error) {
	if s.opts.Images != nil {
		return s.opts.Images, nil
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
