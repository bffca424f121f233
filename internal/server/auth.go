package server

import (
	"net/http"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/pkg/api"
)

// authenticate requires "Authorization: Bearer <token>" on every route but the
// health check (see internal/auth).
func (s *Server) authenticate(next http.Handler) http.Handler {
	tok := auth.NewToken(s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/health" {
			next.ServeHTTP(w, r)
			return
		}
		if !tok.MatchBearer(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dsec"`)
			s.writeError(w, r, api.NewError(api.CodeUnauthorized, "missing or invalid bearer token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
