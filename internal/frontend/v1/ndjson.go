package v1

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// wantsNDJSON reports whether a client asked for its answer as NDJSON events
// (Accept: application/x-ndjson, or ?stream=true).
func wantsNDJSON(r *http.Request) bool {
	if r.URL.Query().Get("stream") == "true" {
		return true
	}
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(a)); err == nil && mt == "application/x-ndjson" {
			return true
		}
	}
	return false
}

// ndjsonStream writes a streamed answer's NDJSON events, flushing each. The
// 200 header goes with the first event (or start), so a request that fails
// before any event can still be answered with its error's own status. send
// is safe for concurrent use; sendLocked is for callers holding mu.
type ndjsonStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	err     error     // the first write or flush error, then every send's
	last    time.Time // of the last event sent
}

func newNDJSONStream(w http.ResponseWriter) ndjsonStream {
	return ndjsonStream{w: w, rc: http.NewResponseController(w), last: time.Now()}
}

// startLocked sends the 200 header if it has not gone yet.
func (n *ndjsonStream) startLocked() {
	if n.started {
		return
	}
	n.started = true
	n.w.Header().Set("Content-Type", "application/x-ndjson")
	n.w.Header().Set("X-Content-Type-Options", "nosniff")
	n.w.WriteHeader(http.StatusOK)
}

// start sends the 200 header now, before any event.
func (n *ndjsonStream) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.startLocked()
	return n.flushLocked()
}

func (n *ndjsonStream) flushLocked() error {
	if err := n.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) && n.err == nil {
		n.err = err
	}
	return n.err
}

// sendLocked writes one event.
func (n *ndjsonStream) sendLocked(ev any) error {
	if n.err != nil {
		return n.err
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	n.startLocked()
	n.last = time.Now()
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		n.err = err
		return err
	}
	return n.flushLocked()
}

// send writes one event.
func (n *ndjsonStream) send(ev any) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sendLocked(ev)
}

func (n *ndjsonStream) hasStarted() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.started
}

// keepAlive sends ev whenever the stream has been silent for every, until
// stop closes; every <= 0 never. Unless beforeStart, only once the stream
// has started (its first event or header sent).
func (n *ndjsonStream) keepAlive(stop <-chan struct{}, every time.Duration, ev any, beforeStart bool) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			n.mu.Lock()
			if (n.started || beforeStart) && n.err == nil && time.Since(n.last) >= every {
				_ = n.sendLocked(ev)
			}
			n.mu.Unlock()
		}
	}
}
