package server

import (
	"net/http"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/pkg/api"
)

// authenticate requires "Authorization: Bearer <token>" on every route but the
// health check (see internal/auth).
func (s *Server) authenticate(next http.Handler) http.Handler {
	match := auth.NewToken(s.opts.Token).Match
	if s.opts.Authorize != nil {
		match = s.opts.Authorize
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/health" {
			next.ServeHTTP(w, r)
			return
		}
		if tok, ok := auth.Bearer(r); !ok || !match(tok) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dsec"`)
			s.writeError(w, r, api.NewError(api.CodeUnauthorized, "missing or invalid bearer token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
