package noderpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The unary methods (methods.go) travel as plain HTTP/1.1 JSON requests:
//
//	POST /dsec.noderpc.v1.Node/call/METHOD
//	Authorization: Bearer dsec1.<seconds>.<mac>   (the cluster token)
//	Content-Type: application/json
//	<the method's arguments: callArgs as JSON>
//
// answered 200 with the method's result as JSON (an empty body for none), or
// with the error's HTTP status (api.StatusOf) and a wireError as JSON. Trace
// context and trajectory step tags ride in the same headers as on the Connect
// streams. The path sits under the Connect service's, so whatever mounts
// NewHandler's path serves both.
//
// Compared with the same call as a Connect unary (a protobuf envelope around
// the JSON), this writes headers and body in one system call instead of two and
// skips the envelope, the interceptor chain and a copy of the request on each
// side: about a third of a node call's CPU, which is most of what an API server
// spends per create. The Connect unary Call stays served, for clients of
// earlier versions, and a Client falls back to it when a node of an earlier
// version answers this path with 404.
const unaryPrefix = "/dsec.noderpc.v1.Node/call/"

// wireError is an error answer on the unary path: the classified error with its
// flags (ErrorInfo's fields).
type wireError struct {
	Code           api.Code `json:"code"`
	Message        string   `json:"message"`
	Infrastructure bool     `json:"infrastructure,omitempty"`
	Retryable      bool     `json:"retryable,omitempty"`
	RetryAfterMs   int64    `json:"retry_after_ms,omitempty"`
}

// wireErrorType marks an error answer (Content-Type), so that a client tells
// a node's answer from a proxy's or an older node's error page.
const wireErrorType = "application/vnd.dsec.noderpc-error+json"

// serveUnary answers one unary call on the plain path and reports it to the
// observer.
func (h *handler) serveUnary(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	name := strings.TrimPrefix(r.URL.Path, unaryPrefix)
	err := h.unary(w, r, name)
	if err != nil {
		writeWireError(w, err)
	}
	if h.opts.Observer != nil {
		proc := name
		if _, ok := methods[name]; !ok {
			proc = otherProcedure
		}
		code := CodeOK
		if err != nil {
			code = string(errdefs.ToAPI(err).Code)
		}
		h.opts.Observer.RPC(proc, code, time.Since(t0))
	}
}

// unary runs the call of r (writing its answer) or returns why not.
func (h *handler) unary(w http.ResponseWriter, r *http.Request, name string) error {
	if err := verifyTokenCached(&h.macs, h.opts.Secret, r.Header.Get("Authorization"), h.opts.Now(), h.opts.MaxSkew); err != nil {
		h.log.Warn("node rpc: refused a request", "procedure", unaryPrefix+name, "err", err)
		return errdefs.New(api.CodeUnauthorized, "node rpc: %v", err)
	}
	if r.Method != http.MethodPost {
		return errdefs.Invalid("node rpc %s: method %s, want POST", name, r.Method)
	}
	args, err := readBody(r.Body, r.ContentLength)
	if err != nil {
		return fmt.Errorf("node rpc %s: reading arguments: %w", name, err)
	}
	ctx, out := extractStep(extractTrace(r.Context(), r.Header), r.Header)
	res, err := h.runMethod(ctx, name, args)
	if err != nil {
		return err
	}
	hd := w.Header()
	if out != nil && out.Replayed {
		hd.Set(api.ReplayedHeader, "true")
	}
	hd["Content-Type"] = jsonType
	hd["Content-Length"] = []string{strconv.Itoa(len(res))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(res)
	return nil
}

var (
	jsonType    = []string{"application/json"}
	noUserAgent = []string{""} // net/http then sends none
)

// readBody reads a whole request or answer body of at most maxMessageBytes
// (payload_too_large beyond); n is its declared length (-1: unknown).
func readBody(r io.Reader, n int64) ([]byte, error) {
	if n > maxMessageBytes {
		return nil, errdefs.New(api.CodePayloadTooLarge, "%d bytes, more than %d", n, maxMessageBytes)
	}
	if n >= 0 { // the usual case: one allocation of the right size
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, maxMessageBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxMessageBytes {
		return nil, errdefs.New(api.CodePayloadTooLarge, "more than %d bytes", maxMessageBytes)
	}
	return b, nil
}

// writeWireError answers err as a wireError.
func writeWireError(w http.ResponseWriter, err error) {
	ae := errdefs.ToAPI(err)
	we := wireError{Code: ae.Code, Message: ae.Message, Infrastructure: ae.Infrastructure, Retryable: ae.Retryable}
	if d, ok := RetryAfter(err); ok {
		we.RetryAfterMs = max(d.Milliseconds(), 1)
	}
	b, _ := json.Marshal(we)
	w.Header().Set("Content-Type", wireErrorType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	status := ae.Status
	if status == 0 {
		status = api.StatusOf(ae.Code)
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// errOlderNode: the node does not serve the plain unary path (404 without a
// wireError): it is of an earlier version, and the call goes over Connect.
var errOlderNode = errors.New("the node does not serve plain unary calls")

// post runs a unary method on the plain path: it returns the result's JSON, a
// node's answer as *Error, errOlderNode, or the transport's error.
func (c *Client) post(ctx context.Context, method string, args []byte) ([]byte, error) {
	if len(args) > maxMessageBytes { // what the node would refuse: spare it the bytes
		return nil, &Error{API: api.NewError(api.CodePayloadTooLarge, "node rpc %s: %d bytes of arguments, more than %d", method, len(args), maxMessageBytes)}
	}
	var resp *http.Response
	var body []byte
	var err error
	if c.conns != nil {
		resp, body, err = c.conns.roundTrip(ctx, unaryPrefix+method, c.tok.header(c.now()), args)
	} else {
		resp, body, err = c.postTransport(ctx, method, args)
	}
	if err != nil {
		if errdefs.Is(err, api.CodePayloadTooLarge) {
			return nil, &Error{API: api.NewError(api.CodePayloadTooLarge, "node rpc %s: the answer is %v", method, err)}
		}
		return nil, err // the transport's (or the connection broke mid-answer)
	}
	reportReplayed(ctx, resp.Header)
	if resp.StatusCode == http.StatusOK {
		return body, nil
	}
	var we wireError
	if resp.Header.Get("Content-Type") == wireErrorType && json.Unmarshal(body, &we) == nil && we.Code != "" {
		return nil, &Error{
			API: &api.Error{Code: we.Code, Message: we.Message, Infrastructure: we.Infrastructure,
				Retryable: we.Retryable, Status: api.StatusOf(we.Code)},
			RetryAfter: time.Duration(we.RetryAfterMs) * time.Millisecond,
		}
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, errOlderNode
	}
	return nil, unavailable(method, fmt.Errorf("HTTP %d from something that is not a dsec node: %.200q", resp.StatusCode, body))
}

// postTransport runs a unary call through net/http's Transport (a node over
// TLS): the answer with its body read whole.
func (c *Client) postTransport(ctx context.Context, method string, args []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.addr+unaryPrefix+method, bytes.NewReader(args))
	if err != nil {
		return nil, nil, err
	}
	req.Header["Content-Type"] = jsonType
	req.Header["User-Agent"] = noUserAgent // one header less to write and parse
	req.Header["Authorization"] = []string{c.tok.header(c.now())}
	injectTrace(ctx, propagation.HeaderCarrier(req.Header))
	injectStep(ctx, req.Header)
	resp, err := c.tr1.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := readBody(resp.Body, resp.ContentLength)
	return resp, body, err
}
