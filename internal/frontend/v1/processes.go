package v1

import (
	"context"
	"errors"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) {
	req, err := s.decodeExec(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.svc.StartProcess(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) {
	list, err := s.svc.ListProcesses(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if list == nil {
		list = []api.Process{}
	}
	writeJSON(w, http.StatusOK, api.ListProcessesResponse{Processes: list})
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request) {
	p, err := s.svc.GetProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// waitProcess handles POST .../processes/{pid}/wait?timeout_ms=N: it answers with
// the process once it exited, or still running once N ms passed (no N: wait as long
// as the client does).
func (s *Server) waitProcess(w http.ResponseWriter, r *http.Request) {
	ms, err := queryInt(r, "timeout_ms", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	if ms > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		defer cancel()
	}
	s.answerLate(w, r, func() (any, error) { return s.svc.WaitProcess(ctx, r.PathValue("id"), r.PathValue("pid")) })
}

// killProcess handles POST .../processes/{pid}/kill; the body is optional and
// defaults to SIGKILL.
func (s *Server) killProcess(w http.ResponseWriter, r *http.Request) {
	var req api.KillRequest
	if err := s.decodeBody(r, &req); err != nil && !errors.Is(err, errEmptyBody) {
		s.writeError(w, r, err)
		return
	}
	sig, err := parseSignal(req.Signal, int(syscall.SIGKILL))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.svc.KillProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), sig); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// processInput handles POST .../processes/{pid}/input (api.ProcessInput).
func (s *Server) processInput(w http.ResponseWriter, r *http.Request) {
	var in api.ProcessInput
	if err := s.decodeBody(r, &in); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.svc.SendProcessInput(r.Context(), r.PathValue("id"), r.PathValue("pid"), in); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// processLogs handles GET .../processes/{pid}/logs?stream=stdout|stderr&offset=N
// with the raw bytes from offset on.
func (s *Server) processLogs(w http.ResponseWriter, r *http.Request) {
	stream := r.URL.Query().Get("stream")
	switch stream {
	case "":
		stream = "stdout"
	case "stdout", "stderr":
	default:
		s.writeError(w, r, errdefs.Invalid("stream must be stdout or stderr, got %q", stream))
		return
	}
	offset, err := queryInt(r, "offset", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rc, err := s.svc.ProcessLogs(r.Context(), r.PathValue("id"), r.PathValue("pid"), stream, offset)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.DebugContext(r.Context(), "copying process logs", "err", err)
		panic(http.ErrAbortHandler) // signal the truncation to the client
	}
}

// followProcess handles GET .../processes/{pid}/output?stdout_offset=N&
// stderr_offset=N&wait_ms=N&max_bytes=N: the output past the offsets as soon as
// there is some, or the process has ended, or wait_ms has passed
// (api.ProcessOutput).
func (s *Server) followProcess(w http.ResponseWriter, r *http.Request) {
	var req api.FollowRequest
	var err error
	for _, q := range []struct {
		name string
		dst  *int64
	}{{"stdout_offset", &req.StdoutOffset}, {"stderr_offset", &req.StderrOffset}, {"wait_ms", &req.WaitMs}} {
		if *q.dst, err = queryInt(r, q.name, 0); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	maxBytes, err := queryInt(r, "max_bytes", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if maxBytes > api.MaxFollowBytes {
		s.writeError(w, r, errdefs.Invalid("max_bytes must be between 0 and %d, got %d", api.MaxFollowBytes, maxBytes))
		return
	}
	req.MaxBytes = int(maxBytes)
	s.answerLate(w, r, func() (any, error) {
		return s.svc.FollowProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), req)
	})
}
