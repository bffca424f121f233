package v1

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
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

// pruneImages handles POST /v1/images:prune: every image pulled by
// reference that no sandbox uses leaves the node's image cache. It is the
// service's list and removal (one removal per image digest, each refused
// while a sandbox uses the image), so it needs no operation of its own.
func (s *Server) pruneImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.svc.Images(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.PruneImagesResult{Removed: []api.Image{}, InUse: []api.Image{}}
	seen := map[string]bool{}
	for _, img := range imgs {
		if img.Ref == "" || img.Digest == "" || seen[img.Digest] {
			continue
		}
		seen[img.Digest] = true
		err := s.svc.RemoveImage(r.Context(), img.Digest)
		if err == nil {
			out.Removed = append(out.Removed, img)
			out.Bytes += img.Size
			continue
		}
		switch errdefs.CodeOf(err) {
		case api.CodeConflict:
			out.InUse = append(out.InUse, img)
		case api.CodeNotFound:
			// removed meanwhile
		default:
			s.writeError(w, r, err)
			return
		}
	}
	bc, err := s.svc.PruneBuildCache(r.Context())
	switch {
	case err == nil:
		out.BuildCache = &bc
	case errdefs.CodeOf(err) != api.CodeNotImplemented:
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
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

// buildImage handles POST /v1/images:build: the body is the build context as
// a tar stream (plain or gzip); name, dockerfile, target, run_timeout_ms,
// network (the RUN steps' egress policy, api.ParseNetworkPolicy's form;
// default none) and repeated build_arg=KEY=VALUE are query parameters. The
// answer is the result as JSON when the build ends, or, when the client asks
// (Accept: application/x-ndjson or stream=true), NDJSON events
// (api.BuildEvent): the RUN steps' output line by line as it runs, then the
// result or the error.
func (s *Server) buildImage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := api.BuildImageRequest{Name: q.Get("name"), Dockerfile: q.Get("dockerfile"), Target: q.Get("target")}
	if v := q.Get("run_timeout_ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.writeError(w, r, errdefs.Invalid("run_timeout_ms: want a non-negative integer"))
			return
		}
		req.RunTimeoutMs = n
	}
	netp, err := api.ParseNetworkPolicy(q.Get("network"))
	if err != nil {
		s.writeError(w, r, errdefs.Invalid("network: %v", err))
		return
	}
	req.Network = netp
	for _, kv := range q["build_arg"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			s.writeError(w, r, errdefs.Invalid("build_arg %q: want KEY=VALUE", kv))
			return
		}
		if req.BuildArgs == nil {
			req.BuildArgs = map[string]string{}
		}
		req.BuildArgs[k] = v
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBytes)
	if wantsNDJSON(r) {
		s.streamBuild(w, r, req, body)
		return
	}
	out, err := s.svc.BuildImage(r.Context(), req, body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

// pullsInFlight handles GET /v1/images:pulls[?ref=REF]: the image pulls in
// flight (on every live node through a cluster's API server), or the one of
// REF (not_found when none is).
func (s *Server) pullsInFlight(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("ref")
	pulls, err := s.svc.ImagePulls(r.Context(), ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ref == "" {
		writeJSON(w, http.StatusOK, pulls)
		return
	}
	if len(pulls) == 0 {
		s.writeError(w, r, errdefs.NotFound("no pull of %s in flight", ref))
		return
	}
	writeJSON(w, http.StatusOK, pulls[0])
}
