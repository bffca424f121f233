package trajectory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"io"
	"sync"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// execInput is the request's own stdin, kept as the step's input.
func execInput(req api.ExecRequest) []byte {
	if req.StdinBase64 != "" {
		if b, err := base64.StdEncoding.DecodeString(req.StdinBase64); err == nil {
			return b
		}
		return nil
	}
	return []byte(req.Stdin)
}

func execSpec(op, id string, req api.ExecRequest) stepSpec {
	return stepSpec{op: op, sandbox: id, args: NormalizeExec(op, req), input: execInput(req), stored: true}
}

// Exec is a step (exec) when ctx is tagged. A live step runs to completion even
// if ctx ends, so that its result is logged and a re-issue replays it.
func (s *Service) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	tag, out, ok := session.StepFrom(ctx)
	if !ok {
		return s.inner.Exec(ctx, id, req)
	}
	o, l, err := s.begin(ctx, tag, out, execSpec(OpExec, id, req))
	switch {
	case err != nil:
		return api.ExecResult{}, err
	case o != nil:
		if o.Error != nil {
			return api.ExecResult{}, replayError(o)
		}
		if o.Exec == nil {
			return api.ExecResult{}, errdefs.Internal(nil, "step %d of trajectory %q has no exec result", tag.N, tag.Trajectory)
		}
		res := *o.Exec
		res.Replayed = true
		return res, nil
	}
	defer l.guard()
	res, err := s.inner.Exec(session.WithoutStep(l.ctx), id, req)
	if err != nil {
		return res, l.fail(err)
	}
	l.finishOutcome(Outcome{Exec: &res})
	return res, nil
}

// StartProcess is a step (start_process) when ctx is tagged.
func (s *Service) StartProcess(ctx context.Context, id string, req api.ExecRequest) (api.Process, error) {
	tag, out, ok := session.StepFrom(ctx)
	if !ok {
		return s.inner.StartProcess(ctx, id, req)
	}
	o, l, err := s.begin(ctx, tag, out, execSpec(OpStartProcess, id, req))
	switch {
	case err != nil:
		return api.Process{}, err
	case o != nil:
		if o.Error != nil {
			return api.Process{}, replayError(o)
		}
		if o.Process == nil {
			return api.Process{}, errdefs.Internal(nil, "step %d of trajectory %q has no process", tag.N, tag.Trajectory)
		}
		return *o.Process, nil
	}
	defer l.guard()
	p, err := s.inner.StartProcess(session.WithoutStep(l.ctx), id, req)
	if err != nil {
		return p, l.fail(err)
	}
	l.finishOutcome(Outcome{Process: &p})
	return p, nil
}

// ExecStream is a step (exec_stream) when ctx is tagged. The request's own stdin
// (Stdin, StdinBase64) counts in the fingerprint and reaches the process before
// Stream.Stdin, tagged or not. Output flows live; ExecStream returns once the step
// is logged, so a front end that sends its final event after the return sends it
// only when logged. The stream's I/O needs the caller: if ctx ends mid-stream the
// step is of unknown outcome. A replay writes the logged output to the stream and
// returns the logged result (Replayed set) without reading Stdin.
func (s *Service) ExecStream(ctx context.Context, id string, req api.ExecRequest, st session.Stream) (api.ExecResult, error) {
	tag, out, ok := session.StepFrom(ctx)
	spec := execSpec(OpExecStream, id, req)
	if len(spec.input) > 0 {
		if st.Stdin != nil {
			st.Stdin = io.MultiReader(bytes.NewReader(spec.input), st.Stdin)
		} else {
			st.Stdin = bytes.NewReader(spec.input)
		}
	}
	if req.Stdin != "" || req.StdinBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(req.StdinBase64); err != nil {
			return api.ExecResult{}, errdefs.Invalid("stdin_base64: %v", err)
		}
		req.Stdin, req.StdinBase64 = "", ""
	}
	if !ok {
		return s.inner.ExecStream(ctx, id, req, st)
	}
	o, l, err := s.begin(ctx, tag, out, spec)
	switch {
	case err != nil:
		return api.ExecResult{}, err
	case o != nil:
		return replayStream(o, st)
	}
	defer l.guard()
	rec := &streamRecorder{}
	live := st
	live.Stdout = rec.writer("stdout", st.Stdout)
	live.Stderr = rec.writer("stderr", st.Stderr)
	live.Started = func(pid int) {
		rec.started(pid)
		if st.Started != nil {
			st.Started(pid)
		}
	}
	res, err := s.inner.ExecStream(session.WithoutStep(ctx), id, req, live)
	if ctx.Err() != nil {
		l.abort(MarkUnknown) // the caller went away mid-stream
		if err != nil {
			return res, err
		}
		return res, ctx.Err()
	}
	o2, truncated, size, sum := rec.outcome()
	if err != nil {
		if !o2.Started {
			return res, l.fail(err)
		}
		o2.Error = wireError(err) // failed after it started: that is its result
	} else {
		r := res
		r.Stdout, r.Stderr = "", ""
		o2.Exec = &r
	}
	if truncated {
		l.finish(truncatedResult(size, sum))
	} else {
		l.finishOutcome(o2)
	}
	return res, err
}

// replayStream writes a logged stream's output to st.
func replayStream(o *Outcome, st session.Stream) (api.ExecResult, error) {
	if o.Started && st.Started != nil {
		st.Started(o.PID)
	}
	for _, ev := range o.Events {
		w := st.Stdout
		if ev.Stream == "stderr" && st.Stderr != nil {
			w = st.Stderr
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(ev.Data); err != nil {
			return api.ExecResult{}, err
		}
	}
	if o.Error != nil {
		return api.ExecResult{}, replayError(o)
	}
	if o.Exec == nil {
		return api.ExecResult{}, errdefs.Internal(nil, "logged stream has no result")
	}
	res := *o.Exec
	res.Replayed = true
	return res, nil
}

// streamRecorder keeps a live stream's events (up to MaxBodyLog bytes of output;
// beyond that only their size and hash).
type streamRecorder struct {
	mu        sync.Mutex
	o         Outcome
	size      int64
	truncated bool
	sum       hash.Hash // of all output, for a stream over the cap
}

func (r *streamRecorder) started(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.o.Started, r.o.PID = true, pid
}

func (r *streamRecorder) writer(stream string, w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		r.mu.Lock()
		if r.sum == nil {
			r.sum = sha256.New()
		}
		r.sum.Write(p)
		r.size += int64(len(p))
		if !r.truncated && r.size > MaxBodyLog {
			r.truncated = true
			r.o.Events = nil
		}
		if !r.truncated {
			r.o.Events = append(r.o.Events, Event{Stream: stream, Data: bytes.Clone(p)})
		}
		r.mu.Unlock()
		if w == nil {
			return len(p), nil
		}
		return w.Write(p)
	})
}

// outcome returns the recorded events, or for a stream over the cap its size.
func (r *streamRecorder) outcome() (Outcome, bool, int64, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.truncated {
		return r.o, false, 0, ""
	}
	return r.o, true, r.size, hex.EncodeToString(r.sum.Sum(nil))
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
