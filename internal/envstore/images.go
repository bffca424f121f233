package envstore

import (
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/images"
)

// Images resolves environments for the node's image store (images.EnvResolver),
// so that `create --image ENV` mounts ENV's layers.
type Images struct {
	*Store
	// DefaultSpec is the blob store of environments whose manifest names none.
	DefaultSpec string
}

var _ images.EnvResolver = Images{}

// ResolveEnv implements images.EnvResolver.
func (a Images) ResolveEnv(name string) (images.Image, error) {
	m, err := a.Get(name)
	if err != nil {
		return images.Image{}, err
	}
	img, err := images.FromManifest(m, "", a.DefaultSpec)
	if err != nil {
		return images.Image{}, errdefs.Internal(err, "environment %q", name)
	}
	img.Description = "environment"
	return img, nil
}

// ListEnvs implements images.EnvResolver.
func (a Images) ListEnvs() []string {
	names, _ := a.List()
	return names
}
