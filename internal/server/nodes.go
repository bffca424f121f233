package server

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// nodeOperator checks that ctx may change nodes (drain, remove): a token of
// the default project (another project's is permission_denied).
func nodeOperator(ctx context.Context) error {
	if p := auth.ProjectOf(ctx); p != "" && p != api.DefaultProject {
		return errdefs.New(api.CodePermissionDenied, "changing nodes needs a token of the %q project; this token is project %q's", api.DefaultProject, p)
	}
	return nil
}

// nodeAdmin is the service's node group (a cluster's router serves it; one
// node answers not_implemented).
func (s *Server) nodeAdmin() (session.Nodes, error) { return s.svc, nil }

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	na, err := s.nodeAdmin()
	if err == nil {
		var nodes []api.Node
		if nodes, err = na.ListNodes(r.Context()); err == nil {
			if nodes == nil {
				nodes = []api.Node{}
			}
			writeJSON(w, http.StatusOK, api.ListNodesResponse{Nodes: nodes})
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) drainNode(w http.ResponseWriter, r *http.Request)   { s.setDrain(w, r, true) }
func (s *Server) undrainNode(w http.ResponseWriter, r *http.Request) { s.setDrain(w, r, false) }

func (s *Server) setDrain(w http.ResponseWriter, r *http.Request, drain bool) {
	na, err := s.nodeAdmin()
	if err == nil {
		err = nodeOperator(r.Context())
	}
	if err == nil {
		if err = na.SetDrain(r.Context(), r.PathValue("name"), drain); err == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) removeNode(w http.ResponseWriter, r *http.Request) {
	na, err := s.nodeAdmin()
	if err == nil {
		err = nodeOperator(r.Context())
	}
	if err == nil {
		var out api.RemoveNodeResponse
		if out, err = na.RemoveNode(r.Context(), r.PathValue("name")); err == nil {
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	s.writeError(w, r, err)
}
