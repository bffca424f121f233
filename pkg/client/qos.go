package client

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// PauseReclaim freezes a sandbox and pushes its memory out of RAM (into the
// node's swap; without swap only page cache goes, and the answer's
// Reclaim.Note says so). Resume prefetches it back.
func (c *Client) PauseReclaim(ctx context.Context, id string) (api.PauseResponse, error) {
	var out api.PauseResponse
	err := c.do(ctx, call{method: http.MethodPost, path: sandboxPath(id, "/pause"), json: api.PauseRequest{Reclaim: true}, retry: true}, &out)
	return out, err
}

// SetCPUClass changes a sandbox's CPU class: api.CPUClassLS or api.CPUClassBE.
func (c *Client) SetCPUClass(ctx context.Context, id, class string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, call{method: http.MethodPut, path: sandboxPath(id, "/cpu-class"), json: api.SetCPUClassRequest{CPUClass: class}, retry: true}, &sb)
	return sb, err
}

// SetDeadline moves a sandbox's deadline (its TTL) and says what happens at it
// (api.DeadlineRequest).
func (c *Client) SetDeadline(ctx context.Context, id string, req api.DeadlineRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, call{method: http.MethodPut, path: sandboxPath(id, "/deadline"), json: req, retry: true}, &sb)
	return sb, err
}
