package image

import (
	"context"

	"github.com/dsec-dev/dsec/pkg/api"
)

// LayerUsage is a layer's accounting on this node.
type LayerUsage struct {
	BlobSize, BytesFetched, ChunkSize, CacheHits, CacheMisses int64
	Prefetched                                                int64
	Mounted                                                   bool
	Holders                                                   int
}

// LayerAccounting is implemented by a LayerMounter that keeps per-layer
// accounting (layerd): usage by digest, for the layers this node knows.
type LayerAccounting interface {
	LayerUsage(ctx context.Context) (map[string]LayerUsage, error)
}

// View describes img for the API, with this node's accounting of its layers
// (usage by digest; nil: nothing mounted or fetched).
func (img Image) View(usage map[string]LayerUsage, isDefault bool) api.Image {
	v := api.Image{Name: img.Name, Kind: "directory", Default: isDefault, Config: img.Config.API(), Ref: img.Ref, Digest: img.Digest}
	if !img.LastUsed.IsZero() {
		t := img.LastUsed
		v.LastUsed = &t
	}
	if !img.Layered() {
		return v
	}
	v.Kind = "layered"
	for _, l := range img.Layers {
		u := usage[l.Digest]
		il := api.ImageLayer{Digest: l.Digest, Role: l.Role, BlobStore: l.Store, Size: l.Size,
			BytesFetched: u.BytesFetched, ChunkSize: u.ChunkSize, CacheHits: u.CacheHits, CacheMisses: u.CacheMisses,
			Mounted: u.Mounted, Sandboxes: u.Holders, PrefetchList: l.PrefetchList, Prefetched: u.Prefetched}
		if il.Size == 0 {
			il.Size = u.BlobSize
		}
		v.Layers = append(v.Layers, il)
		v.Size += il.Size
		v.BytesFetched += il.BytesFetched
	}
	return v
}
