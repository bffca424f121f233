package agenttest

import (
	"context"
	"slices"
	"sync"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Recorder is an interceptor that remembers what reached the node through it,
// for tests that check what a front end passed on (the create requests, the
// signals and the terminal sizes) rather than only what came back. It changes
// nothing: every call goes on to the node as it came.
type Recorder struct {
	mu      sync.Mutex
	creates []api.CreateSandboxRequest
	signals []int
	resizes []api.TermSize
}

// Interceptor returns the session interceptor that records into r; put it
// directly above the node.
func (r *Recorder) Interceptor() session.Interceptor {
	return func(next session.Service) session.Service { return recording{next, r} }
}

// Creates returns the create requests seen so far.
func (r *Recorder) Creates() []api.CreateSandboxRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.creates)
}

// Signals returns the signals sent so far to streaming execs and processes.
func (r *Recorder) Signals() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.signals)
}

// Resizes returns the terminal sizes sent so far to streaming execs and
// processes.
func (r *Recorder) Resizes() []api.TermSize {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.resizes)
}

func (r *Recorder) control(c session.Control) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.Signal != 0 {
		r.signals = append(r.signals, c.Signal)
	}
	if c.Resize != nil {
		r.resizes = append(r.resizes, *c.Resize)
	}
}

type recording struct {
	session.Service
	r *Recorder
}

func (s recording) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	s.r.mu.Lock()
	s.r.creates = append(s.r.creates, req)
	s.r.mu.Unlock()
	return s.Service.Create(ctx, req)
}

func (s recording) CreateBatch(ctx context.Context, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	s.r.mu.Lock()
	s.r.creates = append(s.r.creates, reqs...)
	s.r.mu.Unlock()
	return s.Service.CreateBatch(ctx, reqs)
}

// ExecStream passes the stream's control messages on to the node, recording
// each, until the exec returns.
func (s recording) ExecStream(ctx context.Context, id string, req api.ExecRequest, sio session.Stream) (api.ExecResult, error) {
	if sio.Control != nil {
		in, out, done := sio.Control, make(chan session.Control), make(chan struct{})
		defer close(done)
		go func() {
			defer close(out)
			for {
				select {
				case c, ok := <-in:
					if !ok {
						return
					}
					s.r.control(c)
					select {
					case out <- c:
					case <-done:
						return
					}
				case <-done:
					return
				}
			}
		}()
		sio.Control = out
	}
	return s.Service.ExecStream(ctx, id, req, sio)
}

func (s recording) KillProcess(ctx context.Context, id, procID string, sig int) error {
	s.r.control(session.Control{Signal: sig})
	return s.Service.KillProcess(ctx, id, procID, sig)
}

func (s recording) SendProcessInput(ctx context.Context, id, procID string, in api.ProcessInput) error {
	if in.Resize != nil {
		s.r.control(session.Control{Resize: in.Resize})
	}
	return s.Service.SendProcessInput(ctx, id, procID, in)
}
