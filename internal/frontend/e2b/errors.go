package e2b

import (
	"encoding/json"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/httpkit"
	"github.com/dsec-dev/dsec/pkg/api"
)

// proxyErrorBody is what E2B's edge proxy answers when a sandbox is not found or
// not running; the SDK turns its 502 into "sandbox not running".
type proxyErrorBody struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Code      int    `json:"code"`
}

// codeOf classifies err, a body over its limit as payload_too_large.
func codeOf(err error) api.Code {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return api.CodePayloadTooLarge
	}
	return errdefs.CodeOf(err)
}

// httpStatus maps a classified error to the control plane's status.
func httpStatus(err error) int { return api.StatusOf(codeOf(err)) }

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(e2bapi.Error{Code: int32(status), Message: "encoding response: " + err.Error()})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeAPIError answers a control-plane or /files request with E2B's Error
// ({code, message}; code is the HTTP status).
func (h *Handler) writeAPIError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status >= 500 {
		h.log.ErrorContext(r.Context(), "e2b request failed", "method", r.Method, "path", r.URL.Path,
			"status", status, "err", msg)
	}
	writeJSON(w, status, e2bapi.Error{Code: int32(status), Message: msg})
}

// writeErr answers with err classified into a status.
// A refusal for lack of room (429) carries Retry-After, which E2B's SDKs wait
// out and retry after.
func (h *Handler) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	httpkit.SetRetryAfter(w.Header(), err)
	h.writeAPIError(w, r, httpStatus(err), err.Error())
}

// writeSandboxGone answers an envd request for a sandbox that is not running the
// way E2B's proxy does.
func writeSandboxGone(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, proxyErrorBody{SandboxID: id, Message: "The sandbox was not found", Code: http.StatusBadGateway})
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
	return connect.NewError(errdefs.ConnectCode(codeOf(err)), err)
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
