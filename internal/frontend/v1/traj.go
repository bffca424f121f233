package v1

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The /v1 mapping of trajectory steps: the step runner itself is the trajectory
// decorator (internal/trajectory) that the server's session service is wrapped
// in. A request to a step route with the api.TrajectoryHeader and api.StepHeader
// headers gets its context tagged (session.WithStep); the handler calls the
// service as for any request, and the answer carries X-Dsec-Replayed: true when
// the decorator answered from the log.

// step tags a step route's requests that carry the trajectory headers.
func (s *Server) step(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r, ow, ok, err := s.tagStep(w, r)
		switch {
		case err != nil:
			s.writeError(w, r, err)
		case ok:
			h(ow, r)
		default:
			h(w, r)
		}
	}
}

// tagStep parses the step headers of r: not tagged (ok false), malformed
// (invalid_argument), or r with its context tagged and the writer that reports
// the outcome. Without a trajectory log a tagged request is not_implemented.
func (s *Server) tagStep(w http.ResponseWriter, r *http.Request) (*http.Request, http.ResponseWriter, bool, error) {
	id, n, ok, err := session.ParseStepHeaders(r.Header.Get(api.TrajectoryHeader), r.Header.Get(api.StepHeader))
	if err != nil || !ok {
		return r, w, false, err
	}
	if s.trajAPI == nil {
		return r, w, false, api.NewError(api.CodeNotImplemented, "this server keeps no trajectory log")
	}
	if s.opts.Projects != nil {
		id = project.TrajectoryKeyOf(r.Context(), id) // the caller's project's trajectory
	}
	ctx, out := session.WithStep(r.Context(), session.Step{Trajectory: id, N: n})
	return r.WithContext(ctx), &outcomeWriter{ResponseWriter: w, out: out}, true, nil
}

// stepsDownstream reports whether ctx is a tagged step that the service passed
// to New logs itself (Options.StepsDownstream without Steps: a cluster's
// router forwards the tag to the sandbox's node, whose decorator logs it).
func (s *Server) stepsDownstream(ctx context.Context) bool {
	if s.steps || s.trajAPI == nil {
		return false
	}
	_, _, ok := session.StepFrom(ctx)
	return ok
}

// replayed says whether the decorator answered r's step from the log.
func replayed(w http.ResponseWriter) bool {
	ow, ok := w.(*outcomeWriter)
	return ok && ow.out.Replayed
}

// outcomeWriter sets X-Dsec-Replayed on the answer of a replayed step. The
// decorator decides before the handler writes anything (even a stream's first
// event), so the header is known when the status is sent.
type outcomeWriter struct {
	http.ResponseWriter
	out   *session.StepOutcome
	wrote bool
}

func (w *outcomeWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if w.out.Replayed {
			w.Header().Set(api.ReplayedHeader, "true")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *outcomeWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flush, full duplex,
// read deadlines).
func (w *outcomeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
