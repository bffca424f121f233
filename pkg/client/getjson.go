package client

import (
	"context"
	"net/http"
	"net/url"
)

// GetJSON sends GET path (already escaped) with query, with the token and the
// retries of every safe call, and decodes the JSON answer into out; a non-2xx
// answer is an *api.Error. It serves routes the client has no method for, such
// as the dashboard's /ui/api/top that `dsec top` reads.
func (c *Client) GetJSON(ctx context.Context, path string, query url.Values, out any) error {
	return c.do(ctx, call{method: http.MethodGet, path: path, query: query, retry: true}, out)
}
