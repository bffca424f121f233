package v1

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	info, err := s.svc.Info(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// createSandbox handles POST /v1/sandboxes. The Idempotency-Key header fills
// RequestID when the body has none; both set and different is an error.
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		switch req.RequestID {
		case "":
			req.RequestID = key
		case key:
		default:
			s.writeError(w, r, errdefs.Invalid("Idempotency-Key header %q differs from request_id %q", key, req.RequestID))
			return
		}
	}
	if wantsNDJSON(r) {
		s.createStream(w, r, req)
		return
	}
	if req.ReadyCmd != "" || req.ReadyPort != 0 {
		// The node answers once the start command is ready: keep the
		// connection busy meanwhile, as a long exec does.
		s.answerLateStatus(w, r, http.StatusCreated, func() (any, error) { return s.svc.Create(r.Context(), req) })
		return
	}
	sbx, err := s.svc.Create(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, sbx)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	s.sandboxOp(w, r, s.svc.Get)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.Delete(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) {
	s.sandboxOp(w, r, s.svc.Resume)
}

func (s *Server) resetSandbox(w http.ResponseWriter, r *http.Request) {
	s.sandboxOp(w, r, s.svc.Reset)
}

// sandboxOp runs a session method taking the {id} and answering with the sandbox.
func (s *Server) sandboxOp(w http.ResponseWriter, r *http.Request,
	op func(ctx context.Context, id string) (api.Sandbox, error)) {
	sbx, err := op(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sbx)
}
