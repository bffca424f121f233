// Package v1 is dsec's /v1 HTTP front end, a thin mapping over a
// session.Service: routes to session calls, errors to statuses and stable codes,
// bearer-token auth, request size limits, the exec/stream NDJSON framing, the HTTP
// proxy into sandboxes (through Service.Dial) and the OpenAPI document.
// Trajectory steps are the session service's trajectory decorator
// (internal/trajectory); the server only tags a request's context from its
// X-Dsec-Trajectory/X-Dsec-Step headers, answers X-Dsec-Replayed from the
// outcome and maps the trajectory API onto the decorator (traj.go, traj_api.go).
package v1
