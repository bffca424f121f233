package node

import (
	"context"
	"io"
	"path/filepath"
	"time"

	"github.com/dsec-dev/dsec/internal/image"

	"github.com/dsec-dev/dsec/pkg/api"
)

// The image routes (session.Images) map onto the environment store; the
// logic lives there and in internal/image.

// Compose implements session.Images: an environment in the node's
// envstore (layers by name or digest, checked in the node's blob store).
func (n node) Compose(ctx context.Context, req api.ComposeImageRequest) (api.Image, error) {
	if _, err := n.envs.Compose(ctx, req.Name, req.Base, req.Toolkits, req.Workspace); err != nil {
		return api.Image{}, err
	}
	return n.Manager.Image(ctx, req.Name)
}

// imageCacheGrace keeps a pulled image used this recently from eviction:
// a create that resolved it may not have registered its sandbox yet.
const imageCacheGrace = time.Minute

// blobEvictInterval is how often a node with a shared blob store under a
// budget checks it (besides after each pull that fetched).
const blobEvictInterval = time.Minute

// RemoveImage implements session.Images (refused while a sandbox uses it): a
// registry reference or an image digest leaves the node's image cache
// (pull.Puller.Remove), any other name is an environment.
func (n node) RemoveImage(ctx context.Context, name string) error {
	if image.IsReference(name) && n.puller != nil {
		_, err := n.puller.Remove(ctx, name)
		return err
	}
	return n.envs.Remove(ctx, name)
}

// RecordImage implements session.Images (envstore.Store.RecordPrefetch).
func (n node) RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error) {
	return n.envs.RecordPrefetch(ctx, n.layers, name)
}

// Layer supervision. layerd (internal/image/lazy) outlives the server so that running
// sandboxes keep their layers across a server restart, and its holder starts it
// again if it dies. The server's part: start it on the first layered create
// (lazy.Client), and stop it when the server stops with no sandbox left, so that
// an idle node keeps no layerd, holder or mount.

// stopLayersIfIdle stops layerd and its holder, unmounting every layer, if no
// sandbox is left on the node (none could read its layers any more), once
// the teardowns of deleted sandboxes (which release their layers) ended.
func (d *Daemon) stopLayersIfIdle(ctx context.Context) error {
	d.Manager.WaitTeardowns()
	if n := d.Manager.Count(); n > 0 {
		d.cfg.Logger.Info("layerd keeps serving the layers of the sandboxes left", "sandboxes", n)
		return nil
	}
	return d.Layers.Stop(ctx)
}

// BuildImage implements session.Images: the Dockerfile build runs on this
// node (internal/image/build), its context unpacked under the commit scratch
// dir while it runs.
func (n node) BuildImage(ctx context.Context, req api.BuildImageRequest, buildContext io.Reader) (api.BuildImageResult, error) {
	return n.builder.FromTar(ctx, filepath.Join(n.scratch, "builds"), req, buildContext)
}

// PruneBuildCache implements session.Images (build.Builder.Prune).
func (n node) PruneBuildCache(ctx context.Context) (api.BuildCachePruned, error) {
	p, err := n.builder.Prune(ctx)
	return api.BuildCachePruned{Entries: len(p.Entries), Bytes: p.Bytes, Kept: p.Kept}, err
}

// pulledBlobs returns the blobs of the images pulled by reference (the
// build cache never deletes them).
func (d *Daemon) pulledBlobs(context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	if d.puller == nil {
		return out, nil
	}
	imgs, err := d.puller.Cached()
	if err != nil {
		return nil, err
	}
	for _, c := range imgs {
		for _, l := range c.Manifest.Layers {
			out[l.Digest], out[l.Index] = true, true
		}
	}
	return out, nil
}
