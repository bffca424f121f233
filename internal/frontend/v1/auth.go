package v1

import (
	"net/http"

	"github.com/dsec-dev/dsec/internal/auth"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/pkg/api"
)

// authenticate requires "Authorization: Bearer <token>" on every route but the
// health check (httpkit.BearerAuth) and puts the token's project in the
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
	return httpkit.BearerAuth{
		Identify: identify,
		Open:     func(r *http.Request) bool { return r.URL.Path == "/v1/health" },
		Deny: func(w http.ResponseWriter, r *http.Request) {
			s.writeError(w, r, api.NewError(api.CodeUnauthorized, httpkit.UnauthorizedMessage))
		},
	}.Wrap(next)
}
