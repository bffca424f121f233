package v1

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/codeint"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// maxCodeTimeout bounds a cell's timeout.
const maxCodeTimeout = 24 * time.Hour

// runCodeRequest is the body of POST /v1/sandboxes/{id}/code:run.
type runCodeRequest struct {
	Code     string            `json:"code"`
	Language string            `json:"language,omitempty"` // python (default), javascript, typescript, bash, r, java
	Context  string            `json:"context,omitempty"`  // a context id (not with language)
	Env      map[string]string `json:"env,omitempty"`      // for this cell only
	Timeout  float64           `json:"timeout,omitempty"`  // seconds; the cell is interrupted after it
}

// runCode handles POST /v1/sandboxes/{id}/code:run: one cell in the
// sandbox's code interpreter (package codeint), started on first use, its
// kernels persistent between calls. The answer is NDJSON, one event a line as
// the cell runs (number_of_executions, stdout, stderr, result, error), ending
// with end_of_execution; a cell past its timeout is interrupted and ends with
// an error event named TimeoutError. Errors before the cell runs (a bad
// language, an unknown context, an image without the interpreter) are /v1
// errors.
func (s *Server) runCode(w http.ResponseWriter, r *http.Request) {
	var req runCodeRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Context != "" && req.Language != "" {
		s.writeError(w, r, errdefs.Invalid("give context or language, not both"))
		return
	}
	if req.Timeout < 0 || time.Duration(req.Timeout*float64(time.Second)) > maxCodeTimeout {
		s.writeError(w, r, errdefs.Invalid("timeout %v: want 0 (none) to %v seconds", req.Timeout, maxCodeTimeout.Seconds()))
		return
	}
	id, ok := s.codeService(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	cellCtx, cancel := ctx, context.CancelFunc(func() {})
	if req.Timeout > 0 {
		cellCtx, cancel = context.WithTimeout(ctx, time.Duration(req.Timeout*float64(time.Second)))
	}
	defer cancel()
	out, err := s.code.Execute(cellCtx, id, codeint.ExecuteRequest{Code: req.Code, Language: req.Language,
		ContextID: req.Context, EnvVars: req.Env})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = errdefs.New(api.CodeDeadlineExceeded, "the cell did not start within %vs", req.Timeout)
		}
		s.writeError(w, r, err)
		return
	}
	defer out.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a result line carries whole images
	ended := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if strings.Contains(string(line), `"end_of_execution"`) {
			ended = true
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return // the client left: closing out interrupts the cell
		}
		_ = rc.Flush()
		if ended {
			return
		}
	}
	var ev map[string]string
	switch {
	case cellCtx.Err() != nil && ctx.Err() == nil:
		ev = map[string]string{"type": "error", "name": "TimeoutError",
			"value": "the cell ran past its timeout and was interrupted", "traceback": ""}
	case ctx.Err() != nil:
		return
	default:
		ev = map[string]string{"type": "error", "name": "InterpreterError",
			"value": "the code interpreter ended the cell's output early (it may have been restarted)", "traceback": ""}
	}
	b, _ := json.Marshal(ev)
	_, _ = w.Write(append(b, '\n'))
	_, _ = w.Write([]byte(`{"type":"end_of_execution"}` + "\n"))
}

// codeService checks sandbox id and starts its code interpreter unless it
// serves; false when it wrote the error.
func (s *Server) codeService(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if _, err := s.svc.Get(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return "", false
	}
	if err := s.code.Ensure(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return "", false
	}
	return id, true
}

// listCodeContexts handles GET /v1/sandboxes/{id}/code/contexts: the code
// interpreter's contexts, the default one of each language used included.
func (s *Server) listCodeContexts(w http.ResponseWriter, r *http.Request) {
	id, ok := s.codeService(w, r)
	if !ok {
		return
	}
	list, err := s.code.Contexts(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ListCodeContextsResponse{Contexts: list})
}

// createCodeContext handles POST /v1/sandboxes/{id}/code/contexts
// (api.CreateCodeContextRequest; an empty body is a Python context in the
// default directory): a kernel of its own, for code:run's context.
func (s *Server) createCodeContext(w http.ResponseWriter, r *http.Request) {
	var req api.CreateCodeContextRequest
	if err := s.decodeBody(r, &req); err != nil && !errors.Is(err, errEmptyBody) {
		s.writeError(w, r, err)
		return
	}
	id, ok := s.codeService(w, r)
	if !ok {
		return
	}
	cc, err := s.code.CreateContext(r.Context(), id, req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, cc)
}

// restartCodeContext handles POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart:
// the context's kernel is replaced by a fresh one (its state is lost, its id kept).
func (s *Server) restartCodeContext(w http.ResponseWriter, r *http.Request) {
	id, ok := s.codeService(w, r)
	if !ok {
		return
	}
	if err := s.code.RestartContext(r.Context(), id, r.PathValue("ctx")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// deleteCodeContext handles DELETE /v1/sandboxes/{id}/code/contexts/{ctx}: the
// context and its kernel end.
func (s *Server) deleteCodeContext(w http.ResponseWriter, r *http.Request) {
	id, ok := s.codeService(w, r)
	if !ok {
		return
	}
	if err := s.code.RemoveContext(r.Context(), id, r.PathValue("ctx")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
