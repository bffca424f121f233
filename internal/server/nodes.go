package server

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// NodeAdmin is implemented by services that span nodes (the cluster's router):
// GET /v1/nodes and draining. Without it those routes answer not_implemented.
type NodeAdmin interface {
	ListNodes(ctx context.Context) ([]api.Node, error)
	// SetDrain sets (drain) or clears a node's drain flag; an unknown node is
	// not_found.
	SetDrain(ctx context.Context, node string, drain bool) error
	// RemoveNode removes a lost node from the cluster (its registration, env
	// in-use marks and request claims); a live node is conflict, an unknown
	// one not_found.
	RemoveNode(ctx context.Context, node string) (api.RemoveNodeResponse, error)
}

// nodeOperator checks that ctx may change nodes (drain, remove): a token of
// the default project (another project's is permission_denied).
func nodeOperator(ctx context.Context) error {
	if p := auth.ProjectOf(ctx); p != "" && p != api.DefaultProject {
		return errdefs.New(api.CodePermissionDenied, "changing nodes needs a token of the %q project; this token is project %q's", api.DefaultProject, p)
	}
	return nil
}

func (s *Server) nodeAdmin() (NodeAdmin, error) {
	na, ok := s.svc.(NodeAdmin)
	if !ok {
		return nil, errdefs.New(api.CodeNotImplemented, "this server is one node; nodes are listed by a cluster's API server (dsec apiserver)")
	}
	return na, nil
}

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
