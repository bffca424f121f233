package client

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// CreateBatch creates every sandbox of reqs or none (POST /v1/sandboxes:batch).
// A request without a request ID gets one, so the call is retried safely: a
// retried batch creates nothing twice.
func (c *Client) CreateBatch(ctx context.Context, reqs []api.CreateSandboxRequest) ([]api.Sandbox, error) {
	prefix := "batch-" + rand.Text()
	body := api.BatchCreateRequest{Sandboxes: make([]api.CreateSandboxRequest, len(reqs))}
	for i, r := range reqs {
		if r.RequestID == "" {
			r.RequestID = fmt.Sprintf("%s-%d", prefix, i)
		}
		body.Sandboxes[i] = r
	}
	var out api.BatchCreateResponse
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/sandboxes:batch", json: body, retry: true}, &out)
	return out.Sandboxes, err
}

// Nodes lists a cluster's nodes (an API server's GET /v1/nodes).
func (c *Client) Nodes(ctx context.Context) ([]api.Node, error) {
	var out api.ListNodesResponse
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/nodes", retry: true}, &out)
	return out.Nodes, err
}

// SetDrain drains a node (no new sandboxes; its sandboxes keep running) or, with
// drain false, makes it take new ones again.
func (c *Client) SetDrain(ctx context.Context, node string, drain bool) error {
	op := "/undrain"
	if drain {
		op = "/drain"
	}
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/nodes/" + esc(node) + op, retry: true}, nil)
}

// RemoveNode removes a lost node from the cluster: its registration, its
// environments' in-use marks and its request claims; its sandboxes are gone.
// A live node is refused (conflict), an unknown one is not_found.
func (c *Client) RemoveNode(ctx context.Context, node string) (api.RemoveNodeResponse, error) {
	var out api.RemoveNodeResponse
	err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/nodes/" + esc(node), retry: true}, &out)
	return out, err
}
