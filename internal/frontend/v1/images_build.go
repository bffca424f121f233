package v1

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// buildKeepalive is how long a streamed build stays silent before a
// keepalive line (proxies end idle responses).
const buildKeepalive = 15 * time.Second

// maxBuildLogLine is the longest log line of a streamed build; a longer one
// is split.
const maxBuildLogLine = 16 << 10

// buildStream writes a build's NDJSON events. The 200 header goes with the
// first event, so a build that fails before any log (a Dockerfile syntax
// error, an unknown FROM) answers its error's status as a plain request
// would. It is safe for concurrent use.
type buildStream struct {
	ndjsonStream
	part []byte // output not ended by a newline yet
}

func newBuildStream(w http.ResponseWriter) *buildStream {
	bs := &buildStream{ndjsonStream: newNDJSONStream(w)}
	// The header may go out (a keepalive) while the context still uploads.
	_ = bs.rc.EnableFullDuplex()
	return bs
}

// errFinished: the build answered; output written after it is dropped (the
// ResponseWriter is not to be used once the handler returned).
var errFinished = errors.New("the build's answer was sent")

// Write takes the RUN steps' output (BuildImageRequest.Output) and sends
// each complete line as a "log" event.
func (s *buildStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part = append(s.part, p...)
	for {
		line, rest, ok := bytes.Cut(s.part, []byte{'\n'})
		switch {
		case ok && len(line) <= maxBuildLogLine:
			s.part = rest
		case len(s.part) >= maxBuildLogLine:
			line, s.part = s.part[:maxBuildLogLine], s.part[maxBuildLogLine:]
		default:
			return len(p), nil
		}
		// A gone client ends the build through the request's context.
		_ = s.sendLocked(api.BuildEvent{Type: "log", Log: string(line)})
	}
}

// finish sends the output's unended last line and then the result or the
// error; it reports false when nothing was sent yet and err is to be
// answered as a plain error.
func (s *buildStream) finish(res api.BuildImageResult, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.part) > 0 {
		_ = s.sendLocked(api.BuildEvent{Type: "log", Log: string(s.part)})
		s.part = nil
	}
	defer func() { s.err = errFinished }()
	if err != nil {
		if !s.started {
			return false
		}
		_ = s.sendLocked(api.BuildEvent{Type: "error", Error: apiError(err)})
		return true
	}
	_ = s.sendLocked(api.BuildEvent{Type: "result", Result: &res})
	return true
}

// streamBuild runs build with its output streamed to the client as events.
func (s *Server) streamBuild(w http.ResponseWriter, r *http.Request, req api.BuildImageRequest, body io.Reader) {
	bs := newBuildStream(w)
	stop := make(chan struct{})
	go bs.keepAlive(stop, buildKeepalive, api.BuildEvent{Type: "keepalive"}, true)
	req.Output = bs
	res, err := s.svc.BuildImage(r.Context(), req, body)
	close(stop)
	if !bs.finish(res, err) {
		s.writeError(w, r, err)
	}
}
