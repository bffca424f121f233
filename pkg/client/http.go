package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// HTTP sends a request to port inside the sandbox through the server's proxy. path
// may carry a query ("/api?x=1"). The application's response is returned as is (the
// caller closes its body), whatever its status; errors of dsec itself (no such
// sandbox, nothing listening: bad_gateway) are returned as *api.Error.
func (c *Client) HTTP(ctx context.Context, id string, port int, method, path string, body io.Reader, hdr http.Header) (*http.Response, error) {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u := c.addr + sandboxPath(id, "/http/", strconv.Itoa(port)) + path
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("dsec client: building request: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	setStepHeaders(ctx, req.Header)
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if resp.Header.Get(errorHeader) != "" {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}
