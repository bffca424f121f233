// Package httpkit is what every dsec listener shares: bearer-token
// authentication (constant-time, through internal/auth), JSON error bodies in
// /v1's shape (api.ErrorBody), request body limits, request IDs, and an
// http.Server with dsec's timeouts whose Serve ends cleanly on Shutdown.
package httpkit

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/tracing"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ErrorHeader carries an error answer's code (api.Code) next to its body, for
// metrics and clients that do not read the body.
const ErrorHeader = "X-Dsec-Error"

// SetRetryAfter sets Retry-After for an answer with err: the error's own
// delay (errdefs.RetryAfter) in whole seconds, rounded up, at least 1 (RFC
// 9110 delay-seconds, which clients such as E2B's SDKs wait out and retry
// after), or 1 for backpressure without an estimate (resource_exhausted).
func SetRetryAfter(h http.Header, err error) {
	if d, ok := errdefs.RetryAfter(err); ok {
		h.Set("Retry-After", strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10))
	} else if errdefs.CodeOf(err) == api.CodeResourceExhausted {
		h.Set("Retry-After", "1")
	}
}

// Realm is the WWW-Authenticate challenge of a refused request.
const Realm = `Bearer realm="dsec"`

// UnauthorizedMessage is the message of a refused request (/v1's).
const UnauthorizedMessage = "missing or invalid bearer token"

// WriteError answers e as /v1 does: e.Status, the ErrorHeader and a JSON
// api.ErrorBody.
func WriteError(w http.ResponseWriter, e *api.Error) {
	b, _ := json.Marshal(api.ErrorBody{Error: e})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(ErrorHeader, string(e.Code))
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(b, '\n'))
}

// Deny answers a request that carries no valid token.
type Deny func(w http.ResponseWriter, r *http.Request)

// DenyJSON refuses with an unauthenticated api.ErrorBody saying msg.
func DenyJSON(msg string) Deny {
	return func(w http.ResponseWriter, _ *http.Request) {
		WriteError(w, api.NewError(api.CodeUnauthorized, "%s", msg))
	}
}

// BearerAuth checks "Authorization: Bearer TOKEN" before the next handler.
type BearerAuth struct {
	// Identify returns the project a token belongs to and whether it is
	// accepted; a non-empty project is put in the request's context
	// (auth.WithProject).
	Identify func(token string) (project string, ok bool)
	// Deny answers a refused request (default: DenyJSON(UnauthorizedMessage)),
	// after the WWW-Authenticate challenge is set.
	Deny Deny
	// Open, when set, lets requests it reports through without a token (the
	// health check).
	Open func(*http.Request) bool
}

// Token is a BearerAuth accepting one static token (compared as a SHA-256
// digest in constant time; an empty token accepts nothing).
func Token(tok string) BearerAuth {
	t := auth.NewToken(tok)
	return BearerAuth{Identify: func(got string) (string, bool) { return "", t.Match(got) }}
}

// Match is a BearerAuth accepting the tokens match accepts.
func Match(match func(string) bool) BearerAuth {
	return BearerAuth{Identify: func(got string) (string, bool) { return "", match(got) }}
}

// With returns a with deny as its Deny.
func (a BearerAuth) With(deny Deny) BearerAuth { a.Deny = deny; return a }

// Wrap returns next behind the token check.
func (a BearerAuth) Wrap(next http.Handler) http.Handler {
	deny := a.Deny
	if deny == nil {
		deny = DenyJSON(UnauthorizedMessage)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Open != nil && a.Open(r) {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := auth.Bearer(r)
		project := ""
		if ok {
			project, ok = a.Identify(tok)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", Realm)
			deny(w, r)
			return
		}
		if project != "" {
			r = r.WithContext(auth.WithProject(r.Context(), project))
		}
		next.ServeHTTP(w, r)
	})
}

// LimitBody caps every request body at n bytes (a longer one fails its read
// with *http.MaxBytesError); n <= 0 leaves bodies alone.
func LimitBody(n int64, next http.Handler) http.Handler {
	if n <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > n {
			WriteError(w, tooLarge(n))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, n)
		next.ServeHTTP(w, r)
	})
}

func tooLarge(n int64) *api.Error {
	return api.NewError(api.CodePayloadTooLarge, "body exceeds the limit of %d bytes", n)
}

// RequestID gives every request an ID (the client's X-Request-Id when
// plausible, else a new one), echoes it and puts it in the request's context
// and log lines, and opens the request's server span (tracing.Middleware);
// route names the route for span names.
func RequestID(p *tracing.Provider, route func(*http.Request) string, next http.Handler) http.Handler {
	return tracing.Middleware(p, route, next)
}

// Server is an http.Server with dsec's header timeout.
type Server struct{ srv *http.Server }

// NewServer returns a server of h.
func NewServer(h http.Handler) *Server {
	return &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}}
}

// Serve serves l until Shutdown (then it returns nil).
func (s *Server) Serve(l net.Listener) error {
	err := s.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Of returns srv (built elsewhere, e.g. by noderpc) as a Server.
func Of(srv *http.Server) *Server { return &Server{srv: srv} }

// Shutdown stops accepting, closes the listeners and waits for the requests
// in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Stop shuts the server down and closes l (which it never served when a
// start-up failed before its run began).
func (s *Server) Stop(ctx context.Context, l net.Listener) error {
	err := s.srv.Shutdown(ctx)
	if cerr := l.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}

// Actor is the server on l as a run group's actor (lifecycle.Group.Add):
// execute serves l, interrupt shuts the server down within timeout.
func (s *Server) Actor(l net.Listener, timeout time.Duration) (execute func() error, interrupt func(error)) {
	return func() error { return s.Serve(l) }, func(error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_ = s.srv.Shutdown(ctx)
	}
}
