package v1

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ErrorHeader is set on every error response dsec itself produces (its value is the
// error code), so clients of the HTTP proxy can tell dsec's errors from the
// sandboxed application's own responses.
const ErrorHeader = "X-Dsec-Error"

// apiError converts err into the wire error with its status filled in.
func apiError(err error) *api.Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return api.NewError(api.CodePayloadTooLarge, "request body exceeds the limit of %d bytes", mbe.Limit)
	}
	e := errdefs.ToAPI(err)
	if e.Status == 0 {
		c := *e
		c.Status = api.StatusOf(c.Code)
		e = &c
	}
	return e
}

// writeError answers with err as an api.ErrorBody and its status. Internal errors are
// logged with their cause.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := apiError(err)
	if e.Infrastructure {
		// Backpressure (a full node or cluster) is the expected answer to a burst,
		// counted by the metrics: one error line per refused create would flood
		// the log exactly when the operator needs it.
		level := slog.LevelError
		if e.Code == api.CodeResourceExhausted {
			level = slog.LevelDebug
		}
		s.log.Log(r.Context(), level, "request failed", "method", r.Method, "path", r.URL.Path,
			"code", e.Code, "err", err)
	}
	w.Header().Set(ErrorHeader, string(e.Code))
	httpkit.SetRetryAfter(w.Header(), err)
	if r.ContentLength < 0 {
		// A streamed body (exec/stream, an upload) may never end: without this,
		// net/http would read it to its end before sending the answer, and a
		// client that keeps its body open until it has the answer would hang.
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, e.Status, api.ErrorBody{Error: e})
}

// writeJSON answers with v encoded as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.ErrorBody{Error: api.NewError(api.CodeInternal, "encoding response: %v", err)})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
