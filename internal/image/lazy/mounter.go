package lazy

import (
	"context"

	"github.com/dsec-dev/dsec/internal/image"
)

// Mounter adapts a Client to images.LayerMounter.
type Mounter struct {
	*Client
	// Prefetch is passed with every layer ("" = on demand, "full" = fetch and
	// verify the whole blob before mounting).
	Prefetch string
}

var _ image.LayerMounter = Mounter{}

// Acquire implements images.LayerMounter.
func (m Mounter) Acquire(ctx context.Context, holder string, layers []image.Layer) ([]string, error) {
	refs := make([]image.Layer, len(layers))
	for i, l := range layers {
		// What layerd needs of each layer, nothing more on the wire.
		refs[i] = image.Layer{Digest: l.Digest, Store: l.Store, Size: l.Size, Index: l.Index, PrefetchList: l.PrefetchList}
	}
	return m.Client.Acquire(ctx, AcquireRequest{Holder: holder, Layers: refs, Prefetch: m.Prefetch})
}

var _ image.LayerAccounting = Mounter{}

// LayerUsage implements images.LayerAccounting from layerd's stats (empty when
// layerd is not running: nothing is mounted or fetched).
func (m Mounter) LayerUsage(ctx context.Context) (map[string]image.LayerUsage, error) {
	st, err := m.Client.Stats(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]image.LayerUsage, len(st.Layers))
	for _, l := range st.Layers {
		out[l.Digest] = image.LayerUsage{BlobSize: l.BlobSize, BytesFetched: l.FetchedBytes, ChunkSize: l.ChunkSize,
			CacheHits: l.CacheHits, CacheMisses: l.CacheMisses, Mounted: l.Mounted, Holders: l.Refs, Prefetched: l.Prefetched}
	}
	return out, nil
}
