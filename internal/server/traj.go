package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The trajectory layer: a session operation tagged with api.TrajectoryHeader and
// api.StepHeader is a step. step wraps the operation's handler: it normalises the
// request into a fingerprint, asks the store whether the step is a replay, and
// either answers from the log or runs the handler against a recorder and logs its
// answer durably before sending it. See internal/trajectory for the rules.

// stepInput is what a prepare function extracts from a request.
type stepInput struct {
	args  any
	input []byte // body kept for a rebuild (stdin, file content, tar)
	// stored says input is the whole body (not over trajectory.MaxBodyLog).
	stored  bool
	cleanup func()
}

type prepareFunc func(w http.ResponseWriter, r *http.Request) (stepInput, error)

// stepTag is the parsed step headers of a request.
type stepTag struct {
	id string
	n  int
}

func stepTagOf(r *http.Request) (stepTag, bool, error) {
	id, n, ok, err := trajectory.ParseHeaders(r.Header.Get(api.TrajectoryHeader), r.Header.Get(api.StepHeader))
	return stepTag{id, n}, ok, err
}

// step wraps h (a session operation on sandbox {id}) with the trajectory layer.
func (s *Server) step(op string, prepare prepareFunc, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tag, ok, err := stepTagOf(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !ok {
			h(w, r)
			return
		}
		s.runStep(w, r, op, tag, r.PathValue("id"), prepare, h)
	}
}

// runStep is the trajectory layer for one tagged request.
func (s *Server) runStep(w http.ResponseWriter, r *http.Request, op string, tag stepTag, sandboxID string, prepare prepareFunc, h http.HandlerFunc) {
	if s.traj == nil {
		s.writeError(w, r, api.NewError(api.CodeNotImplemented, "this server keeps no trajectory log"))
		return
	}
	in, err := prepare(w, r)
	if in.cleanup != nil {
		defer in.cleanup()
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	fp, args, err := trajectory.Fingerprint(op, in.args)
	if err != nil {
		s.writeError(w, r, errdefs.Internal(err, "fingerprint"))
		return
	}
	ctx := r.Context()
	breq := trajectory.BeginRequest{Trajectory: tag.id, N: tag.n, Op: op, Fingerprint: fp, Args: args,
		Input: in.input, InputStored: in.stored, SandboxID: sandboxID, Now: time.Now()}
	var sb api.Sandbox
	var sbErr error
	if sandboxID != "" { // the step may start or bind the trajectory: it keeps the sandbox's parameters
		sb, sbErr = s.svc.Get(ctx, sandboxID)
		if sbErr == nil {
			breq.Create = createParams(sb)
		}
	}
	dec, err := s.traj.Begin(ctx, breq)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if dec.Replay != nil {
		s.replay(w, r, dec.Replay)
		return
	}
	abort := func(mode trajectory.AbortMode) {
		if err := s.traj.Abort(context.WithoutCancel(ctx), tag.id, tag.n, mode); err != nil {
			s.log.ErrorContext(ctx, "trajectory: abort step", "trajectory", tag.id, "step", tag.n, "err", err)
		}
	}
	if lost, cause := sandboxLost(sb, sbErr); sandboxID != "" && lost {
		abort(trajectory.Rollback)
		if dec.New {
			s.writeError(w, r, sbErr) // a new trajectory on a sandbox that does not exist
			return
		}
		s.writeError(w, r, lostError(tag.id, sandboxID, cause))
		return
	}

	rec := newRecorder(w, op == trajectory.OpExecStream)
	rec.all = op == trajectory.OpHTTP
	var finMu sync.Mutex
	finished := false
	isFinished := func() bool {
		finMu.Lock()
		defer finMu.Unlock()
		return finished
	}
	finish := func(extra []byte) {
		finMu.Lock()
		defer finMu.Unlock()
		if finished {
			return
		}
		finished = true
		res := rec.result(extra)
		if err := s.traj.Finish(context.WithoutCancel(ctx), tag.id, tag.n, res, time.Now()); err != nil {
			s.log.ErrorContext(ctx, "trajectory: step ran but was not logged", "trajectory", tag.id, "step", tag.n, "err", err)
			abort(trajectory.MarkUnknown)
		}
	}
	hr := r
	if op == trajectory.OpExecStream {
		rec.gate = func(final []byte) { finish(final) }
	} else {
		// The step runs to completion even if the client goes away, so that its
		// result is logged and a re-issue replays it.
		hr = r.WithContext(context.WithoutCancel(ctx))
	}
	hr = hr.WithContext(context.WithValue(hr.Context(), recorderKey{}, rec))
	completed := false
	defer func() {
		if !completed && !isFinished() { // the handler panicked (e.g. a cut download)
			abort(trajectory.MarkUnknown)
		}
	}()
	h(rec, hr)
	completed = true
	if isFinished() {
		return // exec/stream: logged before its final event
	}
	if code := api.Code(rec.header().Get(ErrorHeader)); code != "" {
		e := api.NewError(code, "")
		gone := sandboxID != "" && code == api.CodeSandboxGone
		if sandboxID != "" && code == api.CodeNotFound {
			_, gerr := s.svc.Get(ctx, sandboxID)
			gone = errdefs.Is(gerr, api.CodeNotFound)
		}
		switch {
		case gone:
			abort(trajectory.Rollback)
			s.writeError(w, r, lostError(tag.id, sandboxID, "it disappeared while the step ran"))
			return
		case e.Retryable && !rec.passthrough:
			// dsec failed, not the step: nothing is logged and it may be retried.
			abort(trajectory.Rollback)
			rec.flush()
			return
		}
	}
	if op == trajectory.OpExecStream && ctx.Err() != nil {
		abort(trajectory.MarkUnknown) // the client went away mid-stream
		return
	}
	finish(nil)
	rec.flush()
}

// sandboxLost says whether a sandbox lookup shows the sandbox is gone.
func sandboxLost(sb api.Sandbox, err error) (bool, string) {
	switch {
	case err != nil && errdefs.Is(err, api.CodeNotFound):
		return true, "it no longer exists"
	case err != nil && errdefs.Is(err, api.CodeSandboxGone):
		return true, "its processes died"
	case err == nil && sb.State == api.StateExited:
		return true, "its init exited"
	}
	return false, ""
}

func lostError(traj, sandboxID, cause string) error {
	return api.NewError(api.CodeTrajectorySandboxLost,
		"sandbox %s of trajectory %q is gone (%s): POST /v1/trajectories/%s/rebuild replays the logged steps onto a fresh sandbox",
		sandboxID, traj, cause, traj)
}

// createParams are the parameters a rebuild creates a replacement sandbox with.
func createParams(sb api.Sandbox) api.CreateSandboxRequest {
	c := api.CreateSandboxRequest{Backend: sb.Backend, Image: sb.Image, CPU: sb.CPU, MemoryBytes: sb.MemoryBytes,
		DiskBytes: sb.DiskBytes, PidsMax: sb.PidsMax, IdleTimeoutSeconds: sb.IdleTimeoutSeconds, Env: sb.Env, Labels: sb.Labels}
	if sb.ExpiresAt != nil {
		c.TTLSeconds = max(1, int64(sb.ExpiresAt.Sub(sb.CreatedAt)/time.Second))
	}
	return c
}

// replay answers from a logged step.
func (s *Server) replay(w http.ResponseWriter, r *http.Request, st *trajectory.Step) {
	res := st.Result
	body := res.Body
	if res.Status == http.StatusOK {
		switch st.Op {
		case trajectory.OpExec:
			body = markExecReplayed(body)
		case trajectory.OpExecStream:
			body = markStreamReplayed(body)
		}
	}
	if st.Op == trajectory.OpExecStream {
		// The client is still sending its input: answer without waiting for it
		// (HTTP/1 would otherwise read the rest of the body before the header).
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			s.log.DebugContext(r.Context(), "replay: enabling full duplex", "err", err)
		}
	}
	h := w.Header()
	for k, v := range res.Header {
		h.Set(k, v)
	}
	if h.Get("Content-Length") != "" {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	h.Set(api.ReplayedHeader, "true")
	w.WriteHeader(res.Status)
	_, _ = w.Write(body)
}

func markExecReplayed(body []byte) []byte {
	var er api.ExecResult
	if json.Unmarshal(body, &er) != nil {
		return body
	}
	er.Replayed = true
	b, err := json.Marshal(er)
	if err != nil {
		return body
	}
	return append(b, '\n')
}

func markStreamReplayed(body []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(body, []byte("\n")) {
		var ev api.StreamEvent
		if bytes.Contains(line, []byte(`"exit"`)) && json.Unmarshal(line, &ev) == nil && ev.Type == "exit" && ev.Result != nil {
			ev.Result.Replayed = true
			if b, err := json.Marshal(ev); err == nil {
				out.Write(append(b, '\n'))
				continue
			}
		}
		out.Write(line)
	}
	return out.Bytes()
}

// keptHeaders are the answer headers a step logs (the proxy logs all).
var keptHeaders = []string{"Content-Type", "Content-Length", ModeHeader, "Last-Modified", ErrorHeader,
	"X-Content-Type-Options", "Allow"}

type recorderKey struct{}

// recorder captures a live step's answer. Buffered (every op but exec/stream), it
// holds the answer until flush, so it is sent only once logged; an answer over
// trajectory.MaxBodyLog spills: it is sent as it comes and logged as a hash. In
// stream mode it passes everything through and calls gate before the final event.
type recorder struct {
	w      http.ResponseWriter
	stream bool
	gate   func(final []byte)
	all    bool // log every header (proxy)

	mu          sync.Mutex
	hdr         http.Header
	status      int
	passthrough bool
	buf         bytes.Buffer
	sum         hash.Hash
	size        int64
	truncated   bool
}

func newRecorder(w http.ResponseWriter, stream bool) *recorder {
	return &recorder{w: w, stream: stream, hdr: http.Header{}, sum: sha256.New()}
}

func (rec *recorder) Header() http.Header { return rec.hdr }

func (rec *recorder) header() http.Header { return rec.hdr }

func (rec *recorder) WriteHeader(code int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.status != 0 {
		return
	}
	rec.status = code
	if rec.stream && code < 400 {
		rec.sendHeader() // a stream's events pass through as they come
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.status == 0 {
		rec.status = http.StatusOK
		if rec.stream {
			rec.sendHeader()
		}
	}
	rec.sum.Write(p)
	rec.size += int64(len(p))
	if !rec.truncated {
		if rec.buf.Len()+len(p) <= trajectory.MaxBodyLog {
			rec.buf.Write(p)
		} else {
			rec.truncated = true
			if !rec.passthrough { // spill what was held, then pass through
				rec.sendHeader()
				if _, err := rec.w.Write(rec.buf.Bytes()); err != nil {
					return 0, err
				}
			}
			rec.buf = bytes.Buffer{}
		}
	}
	if rec.passthrough {
		return rec.w.Write(p)
	}
	return len(p), nil
}

// sendHeader copies the held header to the real writer (buffered mode).
func (rec *recorder) sendHeader() {
	h := rec.w.Header()
	for k, v := range rec.hdr {
		h[k] = v
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	rec.passthrough = true
	rec.w.WriteHeader(rec.status)
}

// FlushError lets http.ResponseController flush a passing-through answer.
func (rec *recorder) FlushError() error {
	rec.mu.Lock()
	pass := rec.passthrough
	rec.mu.Unlock()
	if !pass {
		return nil
	}
	return http.NewResponseController(rec.w).Flush()
}

func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

// result is the answer to log; extra is a final event about to be sent.
func (rec *recorder) result(extra []byte) trajectory.Result {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	res := trajectory.Result{Status: status, Header: map[string]string{}}
	h := rec.hdr
	if rec.all {
		for k, v := range h {
			res.Header[k] = strings.Join(v, ", ")
		}
	} else {
		for _, k := range keptHeaders {
			if v := h.Get(k); v != "" {
				res.Header[k] = v
			}
		}
	}
	size := rec.size + int64(len(extra))
	sum := rec.sum
	if len(extra) > 0 {
		c := sha256.New() // hash.Hash has no clone: re-hash what is held
		if !rec.truncated {
			c.Write(rec.buf.Bytes())
			c.Write(extra)
			sum = c
		}
	}
	res.BodySize, res.BodySHA256 = size, hex.EncodeToString(sum.Sum(nil))
	if rec.truncated || rec.buf.Len()+len(extra) > trajectory.MaxBodyLog {
		res.Truncated = true
		return res
	}
	res.Body = append(append([]byte(nil), rec.buf.Bytes()...), extra...)
	return res
}

// flush sends a held answer.
func (rec *recorder) flush() {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.passthrough {
		return
	}
	rec.sendHeader()
	_, _ = rec.w.Write(rec.buf.Bytes())
}

// streamGate returns the hook exec/stream calls before its final event.
func streamGate(ctx context.Context) func(final []byte) {
	if rec, ok := ctx.Value(recorderKey{}).(*recorder); ok && rec.gate != nil {
		return rec.gate
	}
	return nil
}

// --- prepare functions: normalised arguments per operation ---

func (s *Server) prepareExec(op string) prepareFunc {
	return func(w http.ResponseWriter, r *http.Request) (stepInput, error) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			return stepInput{}, tooLarge(s.opts.MaxBodyBytes)
		}
		raw, err := io.ReadAll(&limitedReader{r: r.Body, n: s.opts.MaxBodyBytes})
		if err != nil {
			return stepInput{}, tooLarge(s.opts.MaxBodyBytes)
		}
		req, err := decodeExecRequest(bytes.NewReader(raw), s.opts.MaxBodyBytes)
		if err != nil {
			return stepInput{}, err
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		stdin, _ := initialStdin(req)
		return stepInput{args: trajectory.NormalizeExec(op, req), input: stdin, stored: true}, nil
	}
}

func (s *Server) prepareExecStream(w http.ResponseWriter, r *http.Request) (stepInput, error) {
	lines := newLineReader(r.Body, s.opts.MaxBodyBytes)
	first, err := lines.next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errEmptyBody
		}
		return stepInput{}, err
	}
	var req api.ExecRequest
	if err := decodeLine(first, &req); err != nil {
		return stepInput{}, err
	}
	if err := validateExecRequest(&req); err != nil {
		return stepInput{}, err
	}
	orig := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(append(append([]byte(nil), first...), '\n')), lines.br), orig}
	stdin, _ := initialStdin(req)
	return stepInput{args: trajectory.NormalizeExec(trajectory.OpExecStream, req), input: stdin, stored: true}, nil
}

// spoolBody reads an upload body (hashing it), keeping up to MaxBodyLog bytes in
// memory and the rest in a temporary file, and replaces r.Body with the copy.
func (s *Server) spoolBody(w http.ResponseWriter, r *http.Request) (data []byte, size int64, sum string, stored bool, cleanup func(), err error) {
	if err := s.checkUpload(r); err != nil {
		return nil, 0, "", false, nil, err
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBytes)
	h := sha256.New()
	var mem bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&mem, h), io.LimitReader(body, trajectory.MaxBodyLog+1))
	if err != nil {
		return nil, 0, "", false, nil, err
	}
	if n <= trajectory.MaxBodyLog {
		r.Body = io.NopCloser(bytes.NewReader(mem.Bytes()))
		return mem.Bytes(), n, hex.EncodeToString(h.Sum(nil)), true, nil, nil
	}
	f, err := os.CreateTemp("", "dsec-step-")
	if err != nil {
		return nil, 0, "", false, nil, errdefs.Internal(err, "spooling the request body")
	}
	cleanup = func() { f.Close(); os.Remove(f.Name()) }
	if _, err := f.Write(mem.Bytes()); err != nil {
		return nil, 0, "", false, cleanup, errdefs.Internal(err, "spooling the request body")
	}
	m, err := io.Copy(io.MultiWriter(f, h), body)
	if err != nil {
		return nil, 0, "", false, cleanup, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, "", false, cleanup, errdefs.Internal(err, "spooling the request body")
	}
	r.Body = f
	return nil, n + m, hex.EncodeToString(h.Sum(nil)), false, cleanup, nil
}

func (s *Server) prepareWrite(op string) prepareFunc {
	return func(w http.ResponseWriter, r *http.Request) (stepInput, error) {
		path, err := queryPath(r)
		if err != nil {
			return stepInput{}, err
		}
		a := trajectory.FileArgs{Path: trajectory.CleanPath(path)}
		if op == trajectory.OpWriteFile {
			if a.Mode, err = parseMode(r.URL.Query().Get("mode"), 0o644); err != nil {
				return stepInput{}, err
			}
		}
		data, size, sum, stored, cleanup, err := s.spoolBody(w, r)
		a.ContentSHA256, a.ContentSize = sum, size
		return stepInput{args: a, input: data, stored: stored, cleanup: cleanup}, err
	}
}

func prepareRead(w http.ResponseWriter, r *http.Request) (stepInput, error) {
	path, err := queryPath(r)
	if err != nil {
		return stepInput{}, err
	}
	return stepInput{args: trajectory.FileArgs{Path: trajectory.CleanPath(path)}}, nil
}

func prepareRemove(w http.ResponseWriter, r *http.Request) (stepInput, error) {
	path, err := queryPath(r)
	if err != nil {
		return stepInput{}, err
	}
	rec, err := queryBool(r, "recursive")
	if err != nil {
		return stepInput{}, err
	}
	return stepInput{args: trajectory.FileArgs{Path: trajectory.CleanPath(path), Recursive: rec}}, nil
}

func (s *Server) prepareMkdir(w http.ResponseWriter, r *http.Request) (stepInput, error) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		return stepInput{}, tooLarge(s.opts.MaxBodyBytes)
	}
	raw, err := io.ReadAll(&limitedReader{r: r.Body, n: s.opts.MaxBodyBytes})
	if err != nil {
		return stepInput{}, tooLarge(s.opts.MaxBodyBytes)
	}
	var req api.MkdirRequest
	if err := decodeJSON(bytes.NewReader(raw), s.opts.MaxBodyBytes, &req); err != nil {
		return stepInput{}, err
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if req.Mode == 0 {
		req.Mode = 0o755
	}
	return stepInput{args: trajectory.FileArgs{Path: trajectory.CleanPath(req.Path), Mode: req.Mode, Parents: req.Parents}}, nil
}

func (s *Server) prepareHTTP(port int, rest string) prepareFunc {
	return func(w http.ResponseWriter, r *http.Request) (stepInput, error) {
		p := rest
		if r.URL.RawQuery != "" {
			p += "?" + r.URL.RawQuery
		}
		a := trajectory.HTTPArgs{Method: r.Method, Port: port, Path: p, ContentType: r.Header.Get("Content-Type")}
		data, size, sum, stored, cleanup, err := s.spoolBody(w, r)
		a.BodySHA256, a.BodySize = sum, size
		if err == nil {
			r.ContentLength = size
		}
		return stepInput{args: a, input: data, stored: stored, cleanup: cleanup}, err
	}
}
