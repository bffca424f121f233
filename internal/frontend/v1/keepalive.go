package v1

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultKeepAlive is how long a blocking answer may stay silent (Options.KeepAlive).
const DefaultKeepAlive = 15 * time.Second

// answerLate answers with what call returns. A call that is still running
// after the keep-alive interval (a blocking exec or process wait of a long
// command) would leave the connection silent, and NATs and proxies drop idle
// connections, so the answer starts then: status 200 with api.KeepAliveHeader,
// then a space every interval (JSON allows leading whitespace) until call
// returns and its result follows. An error that comes after the start is an
// api.ErrorBody with its status in the body (api.LateErrorBody), which the
// SDKs turn back into the error.
func (s *Server) answerLate(w http.ResponseWriter, r *http.Request, call func() (any, error)) {
	s.answerLateStatus(w, r, http.StatusOK, call)
}

// answerLateStatus is answerLate with status as the answer's status when
// call returns within the interval (a create: 201).
func (s *Server) answerLateStatus(w http.ResponseWriter, r *http.Request, status int, call func() (any, error)) {
	type answer struct {
		v   any
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := call()
		done <- answer{v, err}
	}()
	every := s.keepAliveEvery()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	rc := http.NewResponseController(w)
	started := false
	for {
		select {
		case a := <-done:
			switch {
			case !started && a.err != nil:
				s.writeError(w, r, a.err)
			case !started:
				writeJSON(w, status, a.v)
			case a.err != nil:
				e := apiError(a.err)
				b, _ := json.Marshal(api.LateErrorBody{Error: e, Status: e.Status})
				_, _ = w.Write(append(b, '\n'))
			default:
				b, err := json.Marshal(a.v)
				if err != nil {
					e := api.NewError(api.CodeInternal, "encoding response: %v", err)
					b, _ = json.Marshal(api.LateErrorBody{Error: e, Status: http.StatusInternalServerError})
				}
				_, _ = w.Write(append(b, '\n'))
			}
			return
		case <-tick:
			if !started {
				h := w.Header()
				h.Set("Content-Type", "application/json")
				h.Set(api.KeepAliveHeader, "1")
				w.WriteHeader(http.StatusOK)
				started = true
			}
			_, _ = w.Write([]byte{' '})
			_ = rc.Flush()
		}
	}
}

// keepAliveEvery is Options.KeepAlive with its default (<= 0: never).
func (s *Server) keepAliveEvery() time.Duration {
	if s.opts.KeepAlive == 0 {
		return DefaultKeepAlive
	}
	return s.opts.KeepAlive
}
