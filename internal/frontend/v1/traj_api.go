package v1

import (
	"encoding/json"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// The trajectory API: thin handlers over the trajectory decorator.

func (s *Server) trajEnabled(w http.ResponseWriter, r *http.Request) bool {
	if s.trajAPI == nil {
		s.writeError(w, r, api.NewError(api.CodeNotImplemented, "this server keeps no trajectory log"))
		return false
	}
	return true
}

func (s *Server) listTrajectories(w http.ResponseWriter, r *http.Request) {
	if !s.trajEnabled(w, r) {
		return
	}
	list, err := s.trajAPI.ListTrajectories(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ListTrajectoriesResponse{Trajectories: list})
}

func (s *Server) getTrajectory(w http.ResponseWriter, r *http.Request) {
	if !s.trajEnabled(w, r) {
		return
	}
	t, err := s.trajAPI.GetTrajectory(r.Context(), r.PathValue("traj"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// exportTrajectory answers with JSON lines, one step per line.
func (s *Server) exportTrajectory(w http.ResponseWriter, r *http.Request) {
	if !s.trajEnabled(w, r) {
		return
	}
	t, err := s.trajAPI.GetTrajectory(r.Context(), r.PathValue("traj"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	for _, st := range t.Steps {
		if err := enc.Encode(st); err != nil {
			return
		}
	}
}

func (s *Server) deleteTrajectory(w http.ResponseWriter, r *http.Request) {
	if !s.trajEnabled(w, r) {
		return
	}
	if err := s.trajAPI.DeleteTrajectory(r.Context(), r.PathValue("traj")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// rebuildTrajectory handles POST /v1/trajectories/{traj}/rebuild (see
// trajectory.Service.RebuildTrajectory).
func (s *Server) rebuildTrajectory(w http.ResponseWriter, r *http.Request) {
	if !s.trajEnabled(w, r) {
		return
	}
	out, err := s.trajAPI.RebuildTrajectory(r.Context(), r.PathValue("traj"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
