package v1

import (
	"bytes"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// statusWriter records the status and size of a response. Unwrap keeps Flush,
// Hijack, EnableFullDuplex and deadlines reachable through http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests logs every request at debug level once it is answered (when
// debug is on: else it costs nothing).
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w} // recoverPanics reads its status
		if !s.log.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(sw, r)
			return
		}
		start := time.Now()
		defer func() {
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			s.log.DebugContext(r.Context(), "request", "method", r.Method, "path", r.URL.Path,
				"status", status, "bytes", sw.bytes, "duration", time.Since(start))
		}()
		next.ServeHTTP(sw, r)
	})
}

// recoverPanics turns a handler panic into a 500 internal error (or an aborted
// response when the headers were already sent) and logs it with its stack.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw, _ := w.(*statusWriter)
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "panic in handler", "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if sw != nil && sw.status != 0 {
				panic(http.ErrAbortHandler) // too late for an error body: cut the response
			}
			s.writeError(w, r, api.NewError(api.CodeInternal, "internal error: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}

// dispatch routes proxy paths directly (verbatim, without the mux's path cleaning)
// and everything else through the mux, turning its plain-text 404 and 405 answers
// into JSON errors.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	if id, port, rest, ok := splitProxyPath(r.URL.EscapedPath()); ok {
		if err := s.authorizeSandbox(r, id); err != nil {
			s.proxyError(w, r, err)
			return
		}
		s.serveProxy(w, r, id, port, rest)
		return
	}
	if _, pattern := s.mux.Handler(r); pattern != "" {
		// Every /v1/sandboxes/{id} route: the sandbox must be the caller's
		// project's (another project's answers not_found).
		if id, ok := sandboxOf(r.URL.Path); ok && strings.Contains(pattern, sb) {
			if err := s.authorizeSandbox(r, id); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		s.mux.ServeHTTP(w, r)
		return
	}
	// No pattern: not found, method not allowed, or a redirect to a cleaned path.
	rec := &captureWriter{header: http.Header{}}
	s.mux.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusNotFound:
		s.writeError(w, r, api.NewError(api.CodeNotFound, "no route for %s %s", r.Method, r.URL.Path))
	case http.StatusMethodNotAllowed:
		allow := rec.header.Get("Allow")
		w.Header().Set("Allow", allow)
		e := api.NewError(api.CodeInvalidArgument, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)
		e.Status = http.StatusMethodNotAllowed
		s.writeError(w, r, e)
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	}
}

// captureWriter buffers the mux's small fallback responses.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(p)
}

// splitProxyPath splits an escaped "/v1/sandboxes/{id}/http/{port}/{rest}" path.
// rest keeps its leading slash and escaping; it is "/" when absent.
func splitProxyPath(p string) (id, port, rest string, ok bool) {
	p, ok = strings.CutPrefix(p, "/v1/sandboxes/")
	if !ok {
		return "", "", "", false
	}
	parts := strings.SplitN(p, "/", 4)
	if len(parts) < 3 || parts[1] != "http" || parts[0] == "" {
		return "", "", "", false
	}
	rest = "/"
	if len(parts) == 4 {
		rest += parts[3]
	}
	return parts[0], parts[2], rest, true
}
