package v1

import (
	"context"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// removeTimeout bounds a run's delete of its sandbox once the command is
// over (the delete answers before the teardown ends; this is for a
// cluster's node that does not answer).
const removeTimeout = 30 * time.Second

// runSandbox handles POST /v1/sandboxes:run, one full-duplex NDJSON exchange
// for create, exec/stream and delete: the first request line is a
// RunRequest, the further ones StreamInput. The answer's first event is
// "sandbox", then the exec's events as exec/stream sends them. Errors before
// the sandbox exists are ordinary error responses. With remove, the sandbox
// is deleted before the exit event, and also when the client goes away
// mid-way (the request's context ends, which kills the command).
func (s *Server) runSandbox(w http.ResponseWriter, r *http.Request) {
	if _, _, tagged, err := session.ParseStepHeaders(r.Header.Get(api.TrajectoryHeader), r.Header.Get(api.StepHeader)); err != nil || tagged {
		s.writeError(w, r, errdefs.Invalid("a run is not a trajectory step: create the sandbox, then send the step to its exec/stream"))
		return
	}
	var req api.RunRequest
	rc, lines, ok := s.openStream(w, r, &req)
	if !ok {
		return
	}
	if req.Sandbox.Wait != nil && !*req.Sandbox.Wait {
		s.writeError(w, r, errdefs.Invalid("sandbox.wait: false is for a create; a run waits for its sandbox"))
		return
	}
	if err := req.Exec.Validate(); err != nil {
		s.writeError(w, r, errdefs.Invalid("exec: %s", apiError(err).Message))
		return
	}
	// A create the client leaves during ends with the request's context,
	// and a create that ends so leaves nothing behind.
	sb, err := s.svc.Create(r.Context(), req.Sandbox)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ev := &eventWriter{ndjsonStream{w: w, rc: rc}}
	ev.send(api.StreamEvent{Type: "sandbox", Sandbox: &sb})
	var remove func() error
	if req.Remove {
		remove = func() error { return s.removeRun(r.Context(), sb.ID) }
	}
	s.streamExec(w, r, rc, lines, ev, sb.ID, req.Exec, remove)
}

// removeRun deletes a run's sandbox, also after the client left.
func (s *Server) removeRun(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	err := s.svc.Delete(ctx, id)
	if errdefs.Is(err, api.CodeNotFound) { // gone already (its TTL passed)
		return nil
	}
	if err != nil {
		s.log.Warn("run: delete the sandbox once the command is over", "id", id, "err", err)
	}
	return err
}
