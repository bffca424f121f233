package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Code is a stable, machine-readable error code, returned in every error body.
type Code string

// Error codes.
const (
	CodeUnauthorized      Code = "unauthorized"       // 401: missing or wrong bearer token
	CodeInvalidArgument   Code = "invalid_argument"   // 400: malformed or out-of-range input
	CodeNotFound          Code = "not_found"          // 404: no such sandbox, process or file
	CodeAlreadyExists     Code = "already_exists"     // 409: e.g. the file exists
	CodeConflict          Code = "conflict"           // 409: wrong state (e.g. sandbox paused)
	CodePayloadTooLarge   Code = "payload_too_large"  // 413: request body over the limit
	CodeResourceExhausted Code = "resource_exhausted" // 429: node at capacity, retry later or elsewhere
	CodeDeadlineExceeded  Code = "deadline_exceeded"  // 504: the operation timed out (not the command)
	CodeSandboxGone       Code = "sandbox_gone"       // 410: the sandbox's processes died
	CodeUnavailable       Code = "unavailable"        // 503: the node cannot serve now
	CodeInternal          Code = "internal"           // 500: infrastructure failure
	CodeNotImplemented    Code = "not_implemented"    // 501: backend lacks the capability
	// CodeBadGateway (502) says the HTTP proxy could not reach the port inside the
	// sandbox (nothing listening, connection reset): the task's problem, not dsec's.
	CodeBadGateway Code = "bad_gateway"
	// CodeNodeLost (503) says the node that owns the sandbox lost its lease in the
	// cluster (crashed, cut off): the sandbox may answer again when the node is
	// back; infrastructure, retryable.
	CodeNodeLost Code = "node_lost"
	// CodeQuotaExceeded (429) says the caller's project is at one of its quotas
	// (max_sandboxes, cpu, memory_bytes; the message names it): nothing was
	// created. Not infrastructure and not retryable as is: delete sandboxes or
	// ask an operator for a larger quota (dsec project set-quota).
	CodeQuotaExceeded Code = "quota_exceeded"
	// CodeStartFailed (422) says a create's start command (start_cmd or
	// entrypoint) ended before it was ready, or was not ready within the
	// ready timeout: the task's failure, not dsec's. The message names the
	// sandbox, which is kept for inspection, and ends with the command's
	// output.
	CodeStartFailed Code = "start_failed"
	// CodePermissionDenied (403): the token is valid but its project may not do
	// this (project administration needs a token of the admin project "default").
	CodePermissionDenied Code = "permission_denied"

	// Trajectory log (see TrajectoryHeader).
	// CodeTrajectoryDiverged (409): a logged step was re-issued with a different
	// request; the message names the step and both fingerprints.
	CodeTrajectoryDiverged Code = "trajectory_diverged"
	// CodeOutcomeUnknown (409): the step was recorded as started but never finished
	// (the server died while it ran). It is never run again; the next step may go on.
	CodeOutcomeUnknown Code = "outcome_unknown"
	// CodeTrajectorySandboxLost (410): the trajectory's sandbox is gone; POST
	// /v1/trajectories/{id}/rebuild replays its steps onto a fresh one.
	CodeTrajectorySandboxLost Code = "trajectory_sandbox_lost"
)

// Error is the body of every non-2xx response: {"error": {...}}.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Infrastructure is true when dsec itself failed (node, runtime, storage): the
	// request was fine and may succeed elsewhere. It is false for the caller's own
	// mistakes and for the task's failures.
	Infrastructure bool `json:"infrastructure"`
	// Retryable says repeating the same request may succeed.
	Retryable bool `json:"retryable"`
	// Status is the HTTP status the error travelled with (filled in by clients).
	Status int `json:"-"`
}

// ErrorBody wraps Error on the wire.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// KeepAliveHeader marks a 200 answer to a blocking call (exec, process wait)
// that the server started before the call ended, to keep the connection busy
// with whitespace while the command ran: its body is the result or, if the
// call failed after all, a LateErrorBody.
const KeepAliveHeader = "X-Dsec-Keepalive"

// LateErrorBody is the error of a call whose answer had already started
// (KeepAliveHeader): Error as an ErrorBody carries it, and the HTTP status the
// error would have had.
type LateErrorBody struct {
	Error  *Error `json:"error"`
	Status int    `json:"status"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is lets errors.Is(err, &api.Error{Code: api.CodeNotFound}) match on code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// NewError builds an Error with the status and flags its code implies.
func NewError(code Code, format string, args ...any) *Error {
	e := &Error{Code: code, Message: fmt.Sprintf(format, args...)}
	e.Status = StatusOf(code)
	switch code {
	case CodeInternal, CodeUnavailable, CodeNodeLost, CodeSandboxGone, CodeTrajectorySandboxLost:
		e.Infrastructure = true
		e.Retryable = code != CodeSandboxGone && code != CodeTrajectorySandboxLost
	case CodeResourceExhausted, CodeDeadlineExceeded:
		e.Infrastructure = true
		e.Retryable = true
	}
	return e
}

// StatusOf maps an error code to its HTTP status.
func StatusOf(code Code) int {
	switch code {
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeAlreadyExists, CodeConflict, CodeTrajectoryDiverged, CodeOutcomeUnknown:
		return http.StatusConflict
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeResourceExhausted, CodeQuotaExceeded:
		return http.StatusTooManyRequests
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case CodeSandboxGone, CodeTrajectorySandboxLost:
		return http.StatusGone
	case CodeUnavailable, CodeNodeLost:
		return http.StatusServiceUnavailable
	case CodeNotImplemented:
		return http.StatusNotImplemented
	case CodeBadGateway:
		return http.StatusBadGateway
	case CodeStartFailed:
		return http.StatusUnprocessableEntity
	default:
		return http.StatusInternalServerError
	}
}

// AsError finds an *Error in err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
