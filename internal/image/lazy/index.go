package lazy

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// maxIndexBytes bounds a chunk index read from a store (1 TiB of layer at 64 KiB
// chunks is 512 MiB of index; real layers are far smaller).
const maxIndexBytes = 64 << 20

// loadIndex reads a layer's chunk index from its store and checks it against the
// digest the manifest names and against the layer's size. With it, every chunk
// fetched on demand is verified before the kernel sees it.
func loadIndex(ctx context.Context, st blob.Store, ref image.Layer, size int64) (blob.ChunkIndex, int64, error) {
	b, err := blob.ReadSmall(ctx, st, ref.Index, maxIndexBytes)
	if err != nil {
		return blob.ChunkIndex{}, 0, errdefs.Wrap(errdefs.CodeOf(err), err, "chunk index of layer %s in blob store %s", ref.Digest, ref.Store)
	}
	n := int64(len(b))
	ix, err := blob.ParseChunkIndex(b)
	if err != nil {
		return ix, n, err
	}
	if ix.BlobSize != size {
		return ix, n, errdefs.Wrap(api.CodeBadGateway, blob.ErrDigestMismatch, "layer %s is %d bytes in its blob store, its chunk index says %d (truncated or corrupt)", ref.Digest, size, ix.BlobSize)
	}
	return ix, n, nil
}

// checkChunkSize drops what the chunk cache holds of this layer if it was cached
// at another chunk size (an index or a configuration that changed), since chunk
// files are named by index; then it records the size in use.
func (l *layerState) checkChunkSize() {
	marker := filepath.Join(l.d.cache.dir, l.hex+".chunk-size")
	want := strconv.FormatInt(l.chunk, 10)
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == want {
		return
	} else if err == nil || l.d.cache.HasBlob(l.hex) {
		l.d.cache.DropBlob(l.hex)
		_ = os.Remove(l.tablePath())
	}
	if err := os.WriteFile(marker, []byte(want), 0o600); err != nil {
		l.d.log.Warn("chunk size marker", "digest", l.digest, "err", err)
	}
}
