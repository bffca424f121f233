package session

import (
	"io"
	"net/http"
)

// HTTPRequest is one HTTP request to a TCP port inside a sandbox, as a front end's
// proxy forwards it (its headers already stripped of the front end's own).
type HTTPRequest struct {
	Method string
	// Path is the escaped path and query, with a leading slash.
	Path   string
	Header http.Header
	// Body is the request body (nil: none) of ContentLength bytes (-1: unknown).
	Body          io.Reader
	ContentLength int64
}

// HTTPResponse is the sandboxed application's answer; the caller closes Body.
type HTTPResponse struct {
	Status int
	Header http.Header
	Body   io.ReadCloser
}
