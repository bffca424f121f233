package api

import _ "embed"

//go:embed openapi.yaml
var openAPIDoc []byte

// OpenAPI returns the committed OpenAPI 3.0 document describing the /v1 API. The
// slice is shared: callers must not modify it.
func OpenAPI() []byte { return openAPIDoc }
