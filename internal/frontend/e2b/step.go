package e2b

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// withStep tags r's context with the trajectory step its X-Dsec-Trajectory and
// X-Dsec-Step headers name (both or neither), so the session service's
// trajectory decorator logs and replays E2B calls as it does /v1 calls.
func withStep(r *http.Request) (context.Context, *session.StepOutcome, error) {
	traj, stepStr := r.Header.Get(api.TrajectoryHeader), r.Header.Get(api.StepHeader)
	if traj == "" && stepStr == "" {
		return r.Context(), nil, nil
	}
	if traj == "" || stepStr == "" {
		return nil, nil, fmt.Errorf("%s and %s go together", api.TrajectoryHeader, api.StepHeader)
	}
	if !validTrajectoryID(traj) {
		return nil, nil, fmt.Errorf("%s must be 1-128 of [A-Za-z0-9._:-]", api.TrajectoryHeader)
	}
	n, err := strconv.Atoi(stepStr)
	if err != nil || n < 1 {
		return nil, nil, fmt.Errorf("%s must be a positive integer", api.StepHeader)
	}
	ctx, out := session.WithStep(r.Context(), session.Step{Trajectory: traj, N: n})
	return ctx, out, nil
}

func validTrajectoryID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// replayWriter sets X-Dsec-Replayed on an answer the trajectory log gave.
type replayWriter struct {
	http.ResponseWriter
	out   *session.StepOutcome
	wrote bool
}

func (w *replayWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if w.out.Replayed {
			w.Header().Set(api.ReplayedHeader, "true")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *replayWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *replayWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush keeps streaming answers flushing through the wrapper.
func (w *replayWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
