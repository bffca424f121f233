package daemon

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/blob"
	"github.com/dsec-dev/dsec/internal/envstore"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/lazy"
	"github.com/dsec-dev/dsec/pkg/api"
)

// RecordPrefetch stores, for each layer of environment env, the chunks this
// node's sandboxes read (layerd's access list) as a blob in bs and names it in the
// manifest as the layer's prefetch list. Layers nothing read are skipped; none
// read at all is a conflict.
func RecordPrefetch(ctx context.Context, es *envstore.Store, bs blob.Store, layers *lazy.Client, env string) ([]api.RecordedLayer, error) {
	e, err := es.Get(env)
	if err != nil {
		return nil, err
	}
	out := []api.RecordedLayer{}
	for i, l := range e.Layers() {
		al, err := layers.Access(ctx, l.Digest)
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
		if _, err := es.SetPrefetchList(env, l.Digest, dg); err != nil {
			return out, err
		}
		out = append(out, api.RecordedLayer{Role: e.Role(i), Digest: l.Digest, Chunks: len(al.Chunks),
			Bytes: int64(len(al.Chunks)) * al.ChunkSize, List: dg})
	}
	if len(out) == 0 {
		return out, errdefs.Conflict("no layer of %q was read on this node: run its task in a sandbox first", env)
	}
	return out, nil
}

// Compose implements server.ImageManager: it composes an environment in the
// node's envstore (layers by name or digest, checked in the node's blob store).
func (n node) Compose(ctx context.Context, req api.ComposeImageRequest) (api.Image, error) {
	if req.Base == "" {
		return api.Image{}, errdefs.Invalid("base: a base layer is required")
	}
	if _, err := n.envs.Compose(ctx, req.Name, req.Base, req.Toolkits, req.Workspace); err != nil {
		return api.Image{}, err
	}
	return n.Manager.Image(ctx, req.Name)
}

// RemoveImage implements server.ImageManager: an environment (or layer name) no
// sandbox on this node uses (the envstore asks inUse).
func (n node) RemoveImage(ctx context.Context, name string) error {
	return n.envs.Remove(name)
}

// inUse reports whether a sandbox of mgr runs on image name.
func inUse(mgr *agent.Manager) func(string) bool {
	return func(name string) bool {
		sbs, err := mgr.List(context.Background())
		if err != nil {
			return true // cannot tell: refuse to be safe
		}
		for _, sb := range sbs {
			if sb.Image == name {
				return true
			}
		}
		return false
	}
}

// RecordImage implements server.ImageManager (see RecordPrefetch).
func (n node) RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error) {
	return RecordPrefetch(ctx, n.envs, n.envs.Blobs, n.layers, name)
}
