package v1

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/errdefs"
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

// The node routes call the service's node group (a cluster's router serves
// it; one node answers not_implemented).

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := s.svc.ListNodes(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if nodes == nil {
		nodes = []api.Node{}
	}
	writeJSON(w, http.StatusOK, api.ListNodesResponse{Nodes: nodes})
}

func (s *Server) drainNode(w http.ResponseWriter, r *http.Request)   { s.setDrain(w, r, true) }
func (s *Server) undrainNode(w http.ResponseWriter, r *http.Request) { s.setDrain(w, r, false) }

func (s *Server) setDrain(w http.ResponseWriter, r *http.Request, drain bool) {
	err := nodeOperator(r.Context())
	if err == nil {
		err = s.svc.SetDrain(r.Context(), r.PathValue("name"), drain)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) removeNode(w http.ResponseWriter, r *http.Request) {
	err := nodeOperator(r.Context())
	var out api.RemoveNodeResponse
	if err == nil {
		out, err = s.svc.RemoveNode(r.Context(), r.PathValue("name"))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
