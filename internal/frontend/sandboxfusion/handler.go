package sandboxfusion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 64 << 20
	DefaultMemoryBytes  = 1 << 30
	DefaultOutputBytes  = 8 << 20
)

// Options configures a Handler.
type Options struct {
	// Logger receives request failures; nil discards them.
	Logger *slog.Logger
	// MaxBodyBytes limits a request body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// DefaultMemoryBytes is a run's memory limit when memory_limit_MB is -1 or
	// absent (SandboxFusion's "no limit"); default DefaultMemoryBytes.
	DefaultMemoryBytes int64
	// OutputBytes bounds each run's captured stdout (default DefaultOutputBytes).
	OutputBytes int64
	// Image is the FnCall environment ("" is the node's judge image).
	Image string
	// QueueWait is how long a call refused for want of a FnCall slot waits
	// and tries again before it is answered 504 (default DefaultQueueWait).
	QueueWait time.Duration
	// MaxQueued bounds the calls waiting at once; one more is answered 504
	// at once (default DefaultMaxQueued).
	MaxQueued int
	// Sandboxes creates /run_jupyter's sandboxes; nil answers that route
	// 501 not_implemented.
	Sandboxes JupyterSandboxes
	// JupyterImage is the image of /run_jupyter's sandboxes (default
	// DefaultJupyterImage).
	JupyterImage string
	// JestImage is the FnCall environment of the jest language (default
	// DefaultJestImage).
	JestImage string
}

// Handler serves SandboxFusion's routes.
type Handler struct {
	fc   session.FnCalls
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux
}

// New returns a Handler running programs through fc.
func New(fc session.FnCalls, opts Options) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.DefaultMemoryBytes <= 0 {
		opts.DefaultMemoryBytes = DefaultMemoryBytes
	}
	if opts.OutputBytes <= 0 {
		opts.OutputBytes = DefaultOutputBytes
	}
	if opts.QueueWait <= 0 {
		opts.QueueWait = DefaultQueueWait
	}
	if opts.MaxQueued <= 0 {
		opts.MaxQueued = DefaultMaxQueued
	}
	if opts.JestImage == "" {
		opts.JestImage = DefaultJestImage
	}
	if opts.JupyterImage == "" {
		opts.JupyterImage = DefaultJupyterImage
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{fc: newQueue(fc, opts.QueueWait, opts.MaxQueued), opts: opts, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /run_code", serve(h, h.run))
	h.mux.HandleFunc("POST /submit", serve(h, h.evaluate))
	h.mux.HandleFunc("POST /run_jupyter", serve(h, h.runJupyter))
	h.mux.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, "pong")
	})
	return h
}

// Routes are the patterns a parent mux forwards to the Handler (the ping route
// stays on the Handler's own listener, where /v1 is not dsec's API).
func Routes() []string { return []string{"POST /run_code", "POST /submit", "POST /run_jupyter"} }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// serve decodes a request body into Req, answers fn's result as JSON, or its
// error as fail does.
func serve[Req, Resp any](h *Handler, fn func(context.Context, Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := h.decode(w, r, &req); err != nil {
			h.fail(w, r, err)
			return
		}
		resp, err := fn(r.Context(), req)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// run validates req, runs it as one FnCall test and maps the outcome.
func (h *Handler) run(ctx context.Context, req RunCodeRequest) (RunCodeResponse, error) {
	fr, err := h.fnCallRequest(req)
	if errors.Is(err, errNoScalaObject) {
		return noScalaObject(), nil
	}
	if err != nil {
		return RunCodeResponse{}, err
	}
	res, err := h.fc.FnCall(ctx, fr)
	if r, ok := noGPU(req.Language, fr, err); ok {
		return r, nil
	}
	if err != nil {
		return RunCodeResponse{}, err
	}
	var test *api.FnCallTestResult
	if len(res.Tests) > 0 {
		test = &res.Tests[0]
	}
	return response(res, test), nil
}

// decode reads a JSON body as FastAPI would: unknown fields are ignored.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)
	if err := json.NewDecoder(body).Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errdefs.New(api.CodePayloadTooLarge, "request body exceeds %d bytes", mbe.Limit)
		}
		return errdefs.Invalid("request body is not a valid JSON object: %v", err)
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return errdefs.New(api.CodePayloadTooLarge, "request body exceeds %d bytes", h.opts.MaxBodyBytes)
	}
	return nil
}

// fail answers err as FastAPI does ({"detail": ...}), with dsec's error code and
// flags beside it: 4xx for bad input, 5xx for dsec's own failures. Never 429 or
// 503: SandboxFusion's clients (verl) retry only a 504 and score any other
// failure as a wrong answer, so "no room, try again" is a 504 here.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := errdefs.ToAPI(err)
	status := e.Status
	if status == 0 {
		status = api.StatusOf(e.Code)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		status, e.Retryable = http.StatusGatewayTimeout, true
	}
	if e.Infrastructure {
		h.log.ErrorContext(r.Context(), "sandboxfusion request failed", "path", r.URL.Path, "code", e.Code, "err", err)
	}
	writeJSON(w, status, struct {
		Detail         string   `json:"detail"`
		Code           api.Code `json:"code"`
		Infrastructure bool     `json:"infrastructure,omitempty"`
		Retryable      bool     `json:"retryable,omitempty"`
	}{e.Message, e.Code, e.Infrastructure, e.Retryable})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = fmt.Appendf(nil, `{"detail":%q,"code":"internal"}`, err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
