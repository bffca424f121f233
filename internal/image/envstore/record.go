package envstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/pkg/api"
)

// AccessSource reports which chunks of a layer this node's sandboxes read
// (layerd's access list; lazy.Client implements it).
type AccessSource interface {
	Access(ctx context.Context, digest string) (lazy.AccessList, error)
}

// RecordPrefetch stores, for each layer of environment env, the chunks this
// node's sandboxes read (src's access list) as a blob in the store's blob
// store and names it in the manifest as the layer's prefetch list. Layers
// nothing read are skipped; none read at all is a conflict.
func (s *Store) RecordPrefetch(ctx context.Context, src AccessSource, env string) ([]api.RecordedLayer, error) {
	e, err := s.Get(ctx, env)
	if err != nil {
		return nil, err
	}
	// The lists go where the environment's layers are (a cluster's shared
	// store), which nodes mounting it later read.
	bs := s.Blobs
	if e.BlobStore != "" && e.BlobStore != s.Spec {
		if bs, err = blob.Open(e.BlobStore, false); err != nil {
			return nil, err
		}
	}
	if bs == nil {
		return nil, errdefs.Internal(errNoBlobs, "record %q", env)
	}
	out := []api.RecordedLayer{}
	for _, l := range e.Layers {
		al, err := src.Access(ctx, l.Digest)
		if errdefs.CodeOf(err) == api.CodeNotFound || err == nil && len(al.Chunks) == 0 {
			continue
		}
		if err != nil {
			return out, err
		}
		b, _ := json.Marshal(al)
		dg := blob.FromBytes(b)
		if err := bs.Put(ctx, dg, bytes.NewReader(b), int64(len(b))); err != nil {
			return out, err
		}
		if _, err := s.SetPrefetchList(ctx, env, l.Digest, dg); err != nil {
			return out, err
		}
		out = append(out, api.RecordedLayer{Role: l.Role, Digest: l.Digest, Chunks: len(al.Chunks),
			Bytes: int64(len(al.Chunks)) * al.ChunkSize, List: dg})
	}
	if len(out) == 0 {
		return out, errdefs.Conflict("no layer of %q was read on this node: run its task in a sandbox first", env)
	}
	return out, nil
}

var errNoBlobs = errors.New("the environment store has no blob store")
