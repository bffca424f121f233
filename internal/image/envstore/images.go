package envstore

import (
	"context"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
)

// Images resolves environments for the node's image store (images.EnvResolver),
// so that `create --image ENV` mounts ENV's layers.
type Images struct {
	*Store
	// DefaultSpec is the blob store of environments whose manifest names none.
	DefaultSpec string
}

var _ image.EnvResolver = Images{}

// resolveTimeout bounds a lookup in the State (etcd may not answer).
const resolveTimeout = 10 * time.Second

// ResolveEnv implements images.EnvResolver.
func (a Images) ResolveEnv(name string) (image.Image, error) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	m, err := a.Get(ctx, name)
	if err != nil {
		return image.Image{}, err
	}
	img, err := image.FromManifest(m, "", a.DefaultSpec)
	if err != nil {
		return image.Image{}, errdefs.Internal(err, "environment %q", name)
	}
	img.Description = "environment"
	return img, nil
}

// ListEnvs implements images.EnvResolver.
func (a Images) ListEnvs() []string {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	names, _ := a.List(ctx)
	return names
}
