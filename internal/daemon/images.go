package daemon

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// The image routes (server.ImageManager) map onto the environment store; the
// logic lives there and in internal/images.

// Compose implements server.ImageManager: an environment in the node's
// envstore (layers by name or digest, checked in the node's blob store).
func (n node) Compose(ctx context.Context, req api.ComposeImageRequest) (api.Image, error) {
	if _, err := n.envs.Compose(ctx, req.Name, req.Base, req.Toolkits, req.Workspace); err != nil {
		return api.Image{}, err
	}
	return n.Manager.Image(ctx, req.Name)
}

// RemoveImage implements server.ImageManager (refused while a sandbox uses it).
func (n node) RemoveImage(ctx context.Context, name string) error { return n.envs.Remove(name) }

// RecordImage implements server.ImageManager (envstore.Store.RecordPrefetch).
func (n node) RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error) {
	return n.envs.RecordPrefetch(ctx, n.layers, name)
}
