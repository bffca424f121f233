package e2b

import (
	"net/http"
	"sync"
	"time"
)

// flushWindow is how long a streaming answer may hold events back so that
// those produced together leave in one write: a short command's start, end and
// end-of-stream then reach the client as one segment (one wakeup of a client on
// a busy machine instead of four), and a long one's output is at most this late.
const flushWindow = 2 * time.Millisecond

// batchWriter turns a streaming handler's flush after every message into at
// most one flush per flushWindow. Writes and flushes are serialized because the
// delayed flush runs on a timer's goroutine.
type batchWriter struct {
	w     http.ResponseWriter
	f     http.Flusher
	mu    sync.Mutex
	timer *time.Timer
	done  bool
}

func newBatchWriter(w http.ResponseWriter) *batchWriter {
	f, _ := w.(http.Flusher)
	return &batchWriter{w: w, f: f}
}

func (b *batchWriter) Header() http.Header { return b.w.Header() }

func (b *batchWriter) WriteHeader(code int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.w.WriteHeader(code)
}

func (b *batchWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

// Flush schedules a flush within flushWindow.
func (b *batchWriter) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer == nil && !b.done && b.f != nil {
		b.timer = time.AfterFunc(flushWindow, b.flushNow)
	}
}

func (b *batchWriter) flushNow() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer = nil
	if !b.done {
		b.f.Flush()
	}
}

// finish stops delayed flushes; the server then writes the rest as it ends
// the response.
func (b *batchWriter) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}
