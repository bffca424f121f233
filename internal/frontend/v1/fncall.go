package v1

import (
	"encoding/json"
	"net/http"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Body limits of the FnCall routes: sources and test data make bigger bodies than
// the rest of the API.
const (
	maxFnCallBody      = 64 << 20
	maxFnCallBatchBody = 256 << 20
	maxFnCallBatch     = 10000
	// batchParallel bounds the calls of one batch in flight; the engine's pool
	// bounds the runs.
	batchParallel = 64
)

// fnCall handles POST /v1/fncall: bad input is a 400; a program's failure is a
// verdict in the 200 result; an infrastructure failure is a system_error verdict,
// or a 5xx when nothing ran.
func (s *Server) fnCall(w http.ResponseWriter, r *http.Request) {
	fc := s.svc
	var req api.FnCallRequest
	if r.ContentLength > maxFnCallBody {
		s.writeError(w, r, tooLarge(maxFnCallBody))
		return
	}
	if err := decodeJSON(r.Body, maxFnCallBody, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := fc.FnCall(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// fnCallBatch handles POST /v1/fncall/batch: the body is validated as a whole
// JSON document, then results stream as NDJSON lines in completion order, each
// with its index. A call that fails on its own (bad input, nothing could run)
// gets a line with its error, and the others go on.
func (s *Server) fnCallBatch(w http.ResponseWriter, r *http.Request) {
	fc := s.svc
	var req api.FnCallBatchRequest
	if r.ContentLength > maxFnCallBatchBody {
		s.writeError(w, r, tooLarge(maxFnCallBatchBody))
		return
	}
	if err := decodeJSON(r.Body, maxFnCallBatchBody, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	switch {
	case len(req.Calls) == 0:
		s.writeError(w, r, errdefs.Invalid("calls: at least one call is required"))
		return
	case len(req.Calls) > maxFnCallBatch:
		s.writeError(w, r, errdefs.Invalid("calls: at most %d calls", maxFnCallBatch))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	var g errgroup.Group
	g.SetLimit(batchParallel)
	for i, call := range req.Calls {
		// Go waits for a free slot; once the client is gone the calls in flight
		// end quickly and nothing more starts.
		if r.Context().Err() != nil {
			break
		}
		g.Go(func() error {
			res, err := fc.FnCall(r.Context(), call)
			if err != nil {
				res = api.FnCallResult{Verdict: api.VerdictSystemError, Tests: []api.FnCallTestResult{}, Error: apiError(err)}
				if !res.Error.Infrastructure {
					res.Verdict = ""
				}
			}
			res.Index = i
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(res)
			_ = rc.Flush()
			return nil
		})
	}
	_ = g.Wait()
}
