package v1

import (
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// openAPI serves the committed OpenAPI document.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	_, _ = w.Write(api.OpenAPI())
}
