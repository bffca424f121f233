package envstore

import (
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

// ResolveEnv implements images.EnvResolver: the layers base first, as the image
// store orders them.
func (a Images) ResolveEnv(name string) (images.Image, error) {
	e, err := a.Get(name)
	if err != nil {
		return images.Image{}, err
	}
	spec := e.BlobStore
	if spec == "" {
		spec = a.DefaultSpec
	}
	top := e.Layers()
	img := images.Image{Name: name, Description: "environment"}
	for i := len(top) - 1; i >= 0; i-- {
		img.Layers = append(img.Layers, images.Layer{Digest: top[i].Digest, Store: spec, Size: max(top[i].Size, 0), Role: e.Role(i), Index: top[i].Index, PrefetchList: top[i].PrefetchList})
	}
	return img, nil
}

// ListEnvs implements images.EnvResolver.
func (a Images) ListEnvs() []string {
	names, _ := a.List()
	return names
}
