package lazy

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// AccessList is the order in which a node's sandboxes first read a layer's chunks.
// Stored as a blob (`dsec image record`), it is the prefetch list of the layer: a
// node mounting the layer for the first time fetches those chunks in the
// background, several at a time, so a sandbox's start is bound by bandwidth rather
// than by one round trip per chunk.
type AccessList struct {
	Layer     string  `json:"layer"`
	ChunkSize int64   `json:"chunk_size"`
	Chunks    []int64 `json:"chunks"`
}

// prefetchWorkers is how many chunks a prefetch fetches at once.
const prefetchWorkers = 8

// maxAccessListBytes bounds a prefetch list read from a store.
const maxAccessListBytes = 16 << 20

// touch records the first read of chunk idx by a reader.
func (l *layerState) touch(idx int64) {
	l.mu.Lock()
	if !l.touched[idx] {
		l.touched[idx] = true
		l.access = append(l.access, idx)
	}
	l.mu.Unlock()
}

// accessList returns the chunks read so far, in first-read order.
func (l *layerState) accessList() AccessList {
	l.mu.Lock()
	defer l.mu.Unlock()
	return AccessList{Layer: l.digest, ChunkSize: l.chunk, Chunks: append([]int64{}, l.access...)}
}

// ParseAccessList decodes and checks a prefetch list for a layer read in chunks
// of chunk bytes, nchunk of them.
func ParseAccessList(b []byte, layer string, chunk, nchunk int64) (AccessList, error) {
	var al AccessList
	if err := json.Unmarshal(b, &al); err != nil {
		return al, errdefs.New(api.CodeBadGateway, "prefetch list of layer %s: %v", layer, err)
	}
	switch {
	case al.Layer != layer:
		return al, errdefs.New(api.CodeBadGateway, "prefetch list is of layer %s, not %s", al.Layer, layer)
	case al.ChunkSize != chunk:
		return al, errdefs.New(api.CodeBadGateway, "prefetch list of layer %s has %d-byte chunks; the layer is read in %d", layer, al.ChunkSize, chunk)
	}
	for _, c := range al.Chunks {
		if c < 0 || c >= nchunk {
			return al, errdefs.New(api.CodeBadGateway, "prefetch list of layer %s names chunk %d of %d", layer, c, nchunk)
		}
	}
	return al, nil
}

// fetchMany fetches the chunks of idxs that the cache lacks, prefetchWorkers at a
// time (so a store's round trips overlap), counting them in n; it stops at the
// first error or when ctx ends, and returns that error.
func (l *layerState) fetchMany(ctx context.Context, idxs []int64, n *atomic.Int64) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(prefetchWorkers)
	for _, idx := range idxs {
		if gctx.Err() != nil {
			break
		}
		if l.d.cache.Has(l.key(idx)) {
			continue
		}
		g.Go(func() error {
			l.mu.Lock()
			done := l.present[idx] // fetched by a reader meanwhile
			l.mu.Unlock()
			if done {
				return nil
			}
			if _, err := l.fetch(gctx, idx); err != nil {
				return err
			}
			if n != nil {
				n.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// prefetch fetches the metadata chunks meta, then the chunks of the prefetch
// list named digest (if any), that the cache lacks, prefetchWorkers at a time,
// until done or ctx ends (the layer unmounted). Every chunk is verified as a
// read's is. Failures are logged: a prefetch only warms the cache.
func (l *layerState) prefetch(ctx context.Context, meta []int64, digest string) {
	if len(meta) > 0 {
		if err := l.fetchMany(ctx, meta, &l.metaPrefetched); err != nil {
			if ctx.Err() == nil {
				l.d.log.Warn("metadata prefetch failed", "digest", l.digest, "err", err)
			}
			return
		}
	}
	if digest == "" {
		return
	}
	err := func() error {
		b, err := blob.ReadSmall(ctx, l.store, digest, maxAccessListBytes)
		if err != nil {
			return err
		}
		l.fetchedBytes.Add(int64(len(b)))
		al, err := ParseAccessList(b, l.digest, l.chunk, l.nchunk)
		if err != nil {
			return err
		}
		return l.fetchMany(ctx, al.Chunks, &l.prefetched)
	}()
	if err != nil && ctx.Err() == nil {
		l.d.log.Warn("prefetch failed", "digest", l.digest, "list", digest, "err", err)
	}
}
