package noderpc

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// An HTTP request to a port inside a sandbox as one unary call (Client.HTTP):
// the API server's proxy sends trajectory-tagged proxy requests this way, so
// the node's trajectory decorator (its session.HTTPProxy) logs or replays them
// next to the sandbox. Request and answer are buffered whole: a step's body
// must fit maxHTTPStepBody each way (the decorator buffers a step's request
// body anyway).

// maxHTTPStepBody bounds a step's request and answer body: with base64 in the
// JSON arguments it stays under maxMessageBytes.
const maxHTTPStepBody = 16 << 20

// httpCall is the HTTP method's argument.
type httpCall struct {
	Port   int         `json:"port"`
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// HasBody tells an empty body from none.
	HasBody bool `json:"has_body,omitempty"`
}

// httpAnswer is its answer.
type httpAnswer struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
}

// HTTP implements session.HTTPProxy over the node RPC: a step tag on ctx goes
// with the call, and a replayed answer is reported in the caller's outcome.
func (c *Client) HTTP(ctx context.Context, id string, port int, req session.HTTPRequest) (session.HTTPResponse, error) {
	hc := &httpCall{Port: port, Method: req.Method, Path: req.Path, Header: req.Header}
	if req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxHTTPStepBody+1))
		if err != nil {
			return session.HTTPResponse{}, errdefs.Wrap(api.CodeInvalidArgument, err, "HTTP step to sandbox %s: reading the request body", id)
		}
		if len(b) > maxHTTPStepBody {
			return session.HTTPResponse{}, stepTooLarge("request", maxHTTPStepBody)
		}
		hc.Body, hc.HasBody = b, true
	}
	a, err := callFor[httpAnswer](ctx, c, "HTTP", callArgs{ID: id, HTTP: hc})
	if err != nil {
		return session.HTTPResponse{}, err
	}
	return session.HTTPResponse{Status: a.Status, Header: a.Header, Body: io.NopCloser(bytes.NewReader(a.Body))}, nil
}

func stepTooLarge(what string, limit int) error {
	return api.NewError(api.CodePayloadTooLarge, "an HTTP step through an API server carries at most %d MiB of %s body", limit>>20, what)
}

// serveHTTPStep is the HTTP method on the node: the service (its trajectory
// decorator) sends the request; the answer is read whole.
func serveHTTPStep(ctx context.Context, d session.HTTPProxy, a callArgs) (any, error) {
	hc := val(a.HTTP)
	req := session.HTTPRequest{Method: hc.Method, Path: hc.Path, Header: hc.Header}
	if hc.HasBody {
		req.Body, req.ContentLength = bytes.NewReader(hc.Body), int64(len(hc.Body))
	}
	resp, err := d.HTTP(ctx, a.ID, hc.Port, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPStepBody+1))
	if err != nil {
		return nil, api.NewError(api.CodeBadGateway, "proxy to port %d of sandbox %s: reading the answer: %v", hc.Port, a.ID, err)
	}
	if len(b) > maxHTTPStepBody {
		return nil, stepTooLarge("answer", maxHTTPStepBody)
	}
	return httpAnswer{Status: resp.Status, Header: resp.Header, Body: b}, nil
}
