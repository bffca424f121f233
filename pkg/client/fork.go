package client

import (
	"context"
	"net/http"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Fork makes req.Count children of sandbox id that start from its current file
// system (processes are not copied; see api.ForkRequest). Not retried: a retry
// after a lost answer would make another set of children.
func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) (api.ForkResult, error) {
	var out api.ForkResult
	err := c.do(ctx, call{method: http.MethodPost, path: sandboxPath(id, "/fork"), json: req}, &out)
	return out, err
}

// Commit packs sandbox id's writable layer into the new environment req.Name
// (see api.CommitRequest).
func (c *Client) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	var out api.CommitResult
	err := c.do(ctx, call{method: http.MethodPost, path: sandboxPath(id, "/commit"), json: req}, &out)
	return out, err
}
