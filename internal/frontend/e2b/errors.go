package e2b

import (
	"encoding/json"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// apiErrorBody is the control plane's error body: code is the HTTP status.
type apiErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// proxyErrorBody is what E2B's edge proxy answers when a sandbox is not found or
// not running; the SDK turns its 502 into "sandbox not running".
type proxyErrorBody struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Code      int    `json:"code"`
}

// httpStatus maps a classified error to the control plane's status.
func httpStatus(err error) int {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	return api.StatusOf(errdefs.CodeOf(err))
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(apiErrorBody{Code: status, Message: "encoding response: " + err.Error()})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeAPIError answers a control-plane or /files request with {code, message}.
func (h *Handler) writeAPIError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status >= 500 {
		h.log.ErrorContext(r.Context(), "e2b request failed", "method", r.Method, "path", r.URL.Path,
			"status", status, "err", msg)
	}
	writeJSON(w, status, apiErrorBody{Code: status, Message: msg})
}

// writeErr answers with err classified into a status.
func (h *Handler) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	h.writeAPIError(w, r, httpStatus(err), err.Error())
}

// writeSandboxGone answers an envd request for a sandbox that is not running the
// way E2B's proxy does.
func writeSandboxGone(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, proxyErrorBody{SandboxID: id, Message: "The sandbox was not found", Code: http.StatusBadGateway})
}

// connectCode maps a classified error to a Connect code.
func connectCode(err error) connect.Code {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return connect.CodeResourceExhausted
	}
	switch errdefs.CodeOf(err) {
	case api.CodeInvalidArgument:
		return connect.CodeInvalidArgument
	case api.CodeNotFound:
		return connect.CodeNotFound
	case api.CodeAlreadyExists:
		return connect.CodeAlreadyExists
	case api.CodeConflict, api.CodeTrajectoryDiverged, api.CodeOutcomeUnknown:
		return connect.CodeFailedPrecondition
	case api.CodePayloadTooLarge, api.CodeResourceExhausted:
		return connect.CodeResourceExhausted
	case api.CodeDeadlineExceeded:
		return connect.CodeDeadlineExceeded
	case api.CodeUnauthorized:
		return connect.CodeUnauthenticated
	case api.CodeNotImplemented:
		return connect.CodeUnimplemented
	case api.CodeSandboxGone, api.CodeTrajectorySandboxLost, api.CodeUnavailable:
		return connect.CodeUnavailable
	default:
		return connect.CodeInternal
	}
}

// rpcErr turns a session error into a Connect error.
func rpcErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(connectCode(err), err)
}

// writeConnectError answers a Connect route before its handler runs (missing
// header, bad token): Connect's unary error body, which streaming clients read
// from the status alone.
func writeConnectError(w http.ResponseWriter, code connect.Code, msg string) {
	status := http.StatusBadRequest
	switch code {
	case connect.CodeUnauthenticated:
		status = http.StatusUnauthorized
	case connect.CodeNotFound:
		status = http.StatusNotFound
	case connect.CodeInternal:
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code.String(), msg})
}
