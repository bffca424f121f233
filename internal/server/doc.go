// Package server is dsec's HTTP API (/v1): bearer-token auth, JSON errors with stable
// codes, request size limits, idempotent create, exec (blocking and streaming),
// background processes, files, an HTTP proxy into sandboxes and the OpenAPI document.
package server
