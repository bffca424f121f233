package v1

import "net/http"

// proxyRoute is the route pattern of every sandbox HTTP proxy request.
const proxyRoute = sb + "/http/{port}/{path...}"

// Route returns the pattern of the route r is served by ("" when none
// matches): a bounded name for metrics labels and span names, never the raw
// path.
func (s *Server) Route(r *http.Request) string {
	if _, _, _, ok := splitProxyPath(r.URL.EscapedPath()); ok {
		return proxyRoute
	}
	_, p := s.mux.Handler(r)
	return p
}
