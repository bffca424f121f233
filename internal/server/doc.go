// Package server is dsec's /v1 HTTP front end, a thin mapping over a
// session.Service: routes to session calls, errors to statuses and stable codes,
// bearer-token auth, request size limits, the exec/stream NDJSON framing, the HTTP
// proxy into sandboxes (through Service.Dial) and the OpenAPI document. The
// trajectory layer (traj.go) still lives here until it moves into a decorator of
// the session service.
package server
