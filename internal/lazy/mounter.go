package lazy

import (
	"context"

	"github.com/dsec-dev/dsec/internal/images"
)

// Mounter adapts a Client to images.LayerMounter.
type Mounter struct {
	*Client
	// Prefetch is passed with every layer ("" = on demand, "full" = fetch and
	// verify the whole blob before mounting).
	Prefetch string
}

var _ images.LayerMounter = Mounter{}

// Acquire implements images.LayerMounter.
func (m Mounter) Acquire(ctx context.Context, holder string, layers []images.Layer) ([]string, error) {
	refs := make([]LayerRef, len(layers))
	for i, l := range layers {
		refs[i] = LayerRef{Digest: l.Digest, Store: l.Store, Size: l.Size, Prefetch: m.Prefetch}
	}
	return m.Client.Acquire(ctx, holder, refs)
}
