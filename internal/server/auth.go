package server

import (
	"net/http"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/pkg/api"
)

// authenticate requires "Authorization: Bearer <token>" on every route but the
// health check (see internal/auth) and puts the token's project in the
// request's context (auth.ProjectOf).
func (s *Server) authenticate(next http.Handler) http.Handler {
	match := auth.NewToken(s.opts.Token).Match
	if s.opts.Authorize != nil {
		match = s.opts.Authorize
	}
	identify := func(tok string) (string, bool) { return api.DefaultProject, match(tok) }
	if s.opts.Projects != nil {
		identify = s.opts.Projects.Identify
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/health" {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := auth.Bearer(r)
		project := ""
		if ok {
			project, ok = identify(tok)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dsec"`)
			s.writeError(w, r, api.NewError(api.CodeUnauthorized, "missing or invalid bearer token"))
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.WithProject(r.Context(), project)))
	})
}
