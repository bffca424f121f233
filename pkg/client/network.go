package client

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// SetNetwork replaces a sandbox's egress policy (PUT
// /v1/sandboxes/{id}/network); new connections see it at once. The returned
// sandbox's Network field shows the policy and the denied-attempt counter.
func (c *Client) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, call{method: http.MethodPut, path: sandboxPath(id, "/network"), json: p, retry: true}, &sb)
	return sb, err
}
