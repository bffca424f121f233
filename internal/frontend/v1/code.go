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
	Language string            `json:"language,omitempty"` // python (default), javascript, typescript, bash, r
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
	id := r.PathValue("id")
	ctx := r.Context()
	if _, err := s.svc.Get(ctx, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.code.Ensure(ctx, id); err != nil {
		s.writeError(w, r, err)
		return
	}
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
