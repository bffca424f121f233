package client

import (
	"context"
	"crypto/rand"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Create creates a sandbox. A request without RequestID gets a random one, so the
// call is safely retried: the server answers a repeat with the same sandbox.
func (c *Client) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if req.RequestID == "" {
		req.RequestID = "cli-" + rand.Text()
	}
	var sb api.Sandbox
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/sandboxes", json: req, retry: true}, &sb)
	return sb, err
}

// Get describes a sandbox.
func (c *Client) Get(ctx context.Context, id string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, call{method: http.MethodGet, path: sandboxPath(id), retry: true}, &sb)
	return sb, err
}

// List lists the node's sandboxes.
func (c *Client) List(ctx context.Context) ([]api.Sandbox, error) {
	var out api.ListSandboxesResponse
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/sandboxes", retry: true}, &out)
	return out.Sandboxes, err
}

// Delete deletes a sandbox.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: sandboxPath(id)}, nil)
}

// Pause freezes a sandbox.
func (c *Client) Pause(ctx context.Context, id string) (api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "pause")
}

// Resume thaws a paused sandbox.
func (c *Client) Resume(ctx context.Context, id string) (api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "resume")
}

// Reset restores a sandbox to its initial state.
func (c *Client) Reset(ctx context.Context, id string) (api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "reset")
}

func (c *Client) sandboxAction(ctx context.Context, id, action string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, call{method: http.MethodPost, path: sandboxPath(id, "/", action)}, &sb)
	return sb, err
}
