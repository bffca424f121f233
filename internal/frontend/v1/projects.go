package v1

import (
	"context"
	"net/http"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ProjectAuth is the project side of authentication (project.Guard): it names
// each token's project and scopes sandbox IDs to it. Without it every accepted
// token is the default project's.
type ProjectAuth interface {
	// Identify returns the project token belongs to (ok false: refused).
	Identify(token string) (project string, ok bool)
	// Authorize answers not_found unless sandbox id is ctx's project's.
	Authorize(ctx context.Context, id string) error
}

// sandboxOf returns the sandbox ID a /v1/sandboxes/{id}... path names.
func sandboxOf(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/sandboxes/")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, "/")
	return id, id != ""
}

// authorizeSandbox checks that the caller's project owns sandbox id.
func (s *Server) authorizeSandbox(r *http.Request, id string) error {
	if s.opts.Projects == nil {
		return nil
	}
	return s.opts.Projects.Authorize(r.Context(), id)
}

// projects is the service's project group; without project scoping
// (Options.Projects) the routes answer not_implemented.
func (s *Server) projects() (session.Projects, error) {
	if s.opts.Projects == nil {
		return nil, errdefs.New(api.CodeNotImplemented, "projects are not enabled on this server")
	}
	return s.svc, nil
}

func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		var ps []api.Project
		if ps, err = pa.ListProjects(r.Context()); err == nil {
			writeJSON(w, http.StatusOK, api.ListProjectsResponse{Projects: ps})
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) createProject(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		var req api.CreateProjectRequest
		if err = s.decodeBody(r, &req); err == nil {
			var resp api.ProjectTokenResponse
			if resp, err = pa.CreateProject(r.Context(), req); err == nil {
				writeJSON(w, http.StatusCreated, resp)
				return
			}
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		var p api.Project
		if p, err = pa.GetProject(r.Context(), r.PathValue("name")); err == nil {
			writeJSON(w, http.StatusOK, p)
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) deleteProject(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		if err = pa.DeleteProject(r.Context(), r.PathValue("name")); err == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) setQuota(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		var q api.Quota
		if err = s.decodeBody(r, &q); err == nil {
			var p api.Project
			if p, err = pa.SetQuota(r.Context(), r.PathValue("name"), q); err == nil {
				writeJSON(w, http.StatusOK, p)
				return
			}
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) addToken(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		var resp api.ProjectTokenResponse
		if resp, err = pa.AddToken(r.Context(), r.PathValue("name")); err == nil {
			writeJSON(w, http.StatusCreated, resp)
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) removeToken(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		if err = pa.RemoveToken(r.Context(), r.PathValue("name"), r.PathValue("tid")); err == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) setRegistryAuth(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		var a api.RegistryAuth
		if err = s.decodeBody(r, &a); err == nil {
			var p api.Project
			if p, err = pa.SetRegistryAuth(r.Context(), r.PathValue("name"), r.PathValue("host"), a); err == nil {
				writeJSON(w, http.StatusOK, p)
				return
			}
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) removeRegistryAuth(w http.ResponseWriter, r *http.Request) {
	pa, err := s.projects()
	if err == nil {
		if err = pa.RemoveRegistryAuth(r.Context(), r.PathValue("name"), r.PathValue("host")); err == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	s.writeError(w, r, err)
}
