package v1

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// createPollEvery is how often a streamed create reads its image's pull.
const createPollEvery = 250 * time.Millisecond

// createStream answers a create as NDJSON events: the node's pull of the
// image (a registry reference) each time its progress changes, then the
// sandbox or the error (api.CreateEvent). The answer is 200 from the start.
func (s *Server) createStream(w http.ResponseWriter, r *http.Request, req api.CreateSandboxRequest) {
	type answer struct {
		sb  api.Sandbox
		err error
	}
	done := make(chan answer, 1)
	go func() {
		sb, err := s.svc.Create(r.Context(), req)
		done <- answer{sb, err}
	}()
	st := newNDJSONStream(w)
	_ = st.start()
	send := func(ev api.CreateEvent) bool { return st.send(ev) == nil }
	poll := time.NewTicker(createPollEvery)
	defer poll.Stop()
	var last []byte
	for {
		select {
		case a := <-done:
			if a.err != nil {
				e := apiError(a.err)
				send(api.CreateEvent{Type: api.CreateEventError, Error: e, Status: e.Status})
				return
			}
			send(api.CreateEvent{Type: api.CreateEventSandbox, Sandbox: &a.sb})
			return
		case <-poll.C:
			if !image.IsReference(req.Image) {
				continue
			}
			pulls, err := s.svc.ImagePulls(r.Context(), req.Image)
			if err != nil || len(pulls) == 0 {
				continue
			}
			b, _ := json.Marshal(pulls[0])
			if bytes.Equal(b, last) {
				continue
			}
			last = b
			if !send(api.CreateEvent{Type: api.CreateEventPull, Pull: &pulls[0]}) {
				<-done // the client left: its context ends the create
				return
			}
		}
	}
}
