package router

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Images serves /v1/images in a cluster (session.Images): environments and the layer index live in etcd
// (envstore.EtcdState), so a compose through any API server serves every
// node; the layer accounting (mounted, fetched, cache hits, sandboxes) is each
// node's own, asked of every ready node and summed.
type Images struct {
	Store  *envstore.Store
	Router *Router
}

var _ session.Images = (*Images)(nil)

// Cluster is the API tier's base session service: the router, with the
// image group served by Images (environments in etcd, accounting from the
// nodes).
type Cluster struct {
	*Router
	Envs *Images
}

var _ session.Service = Cluster{}

func (c Cluster) Images(ctx context.Context) ([]api.Image, error) { return c.Envs.Images(ctx) }
func (c Cluster) Image(ctx context.Context, name string) (api.Image, error) {
	return c.Envs.Image(ctx, name)
}
func (c Cluster) Compose(ctx context.Context, req api.ComposeImageRequest) (api.Image, error) {
	return c.Envs.Compose(ctx, req)
}
func (c Cluster) RemoveImage(ctx context.Context, name string) error {
	return c.Envs.RemoveImage(ctx, name)
}
func (c Cluster) RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error) {
	return c.Envs.RecordImage(ctx, name)
}

// envView is environment name as etcd has it, without node accounting.
func (im *Images) envView(ctx context.Context, name string) (api.Image, error) {
	img, err := envstore.Images{Store: im.Store, DefaultSpec: im.Store.Spec}.ResolveEnv(name)
	if err != nil {
		return api.Image{}, err
	}
	return img.View(nil, false), nil
}

// Images implements session.Service: every live node's images (directory
// images and environments) merged by name with each node's accounting
// (Router.Images), and every environment in etcd that no node has used yet.
func (im *Images) Images(ctx context.Context) ([]api.Image, error) {
	out, err := im.Router.Images(ctx)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(out))
	for _, img := range out {
		seen[img.Name] = true
	}
	names, err := im.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if seen[n] {
			continue
		}
		if v, err := im.envView(ctx, n); err == nil {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Image implements session.Service: the image as the nodes describe it,
// accounting merged; an environment no node has used comes from etcd.
// A registry reference is pulled on every live node (Router.PullImage).
func (im *Images) Image(ctx context.Context, name string) (api.Image, error) {
	if isReference(name) {
		return im.Router.PullImage(ctx, name)
	}
	v, err := im.Router.Image(ctx, name)
	if err == nil || !errdefs.Is(err, api.CodeNotFound) {
		return v, err
	}
	v, err = im.envView(ctx, name)
	if err == nil || !errdefs.Is(err, api.CodeNotFound) {
		return v, err
	}
	return api.Image{}, errdefs.NotFound("no image or environment named %q in the cluster", name)
}

// Compose implements session.Service: the environment is written to etcd
// (its layers checked in the cluster's blob store), for every node at once.
func (im *Images) Compose(ctx context.Context, req api.ComposeImageRequest) (api.Image, error) {
	if _, err := im.Store.Compose(ctx, req.Name, req.Base, req.Toolkits, req.Workspace); err != nil {
		return api.Image{}, err
	}
	return im.envView(ctx, req.Name)
}

// RemoveImage implements session.Service: refused while a sandbox on any
// node uses the environment (the nodes' marks in etcd, checked in the same
// transaction as the delete).
func (im *Images) RemoveImage(ctx context.Context, name string) error {
	return im.Store.Remove(ctx, name)
}

// ImagePulls implements session.Images: the live nodes' pulls in flight
// (Router.ImagePulls).
func (im *Images) ImagePulls(ctx context.Context, ref string) ([]api.PullProgress, error) {
	return im.Router.ImagePulls(ctx, ref)
}

// RecordImage implements session.Service: the chunks read on a node whose
// sandboxes used the environment become its prefetch lists; nodes are asked
// in turn until one has read it.
func (im *Images) RecordImage(ctx context.Context, name string) ([]api.RecordedLayer, error) {
	if _, err := im.Store.Get(ctx, name); err != nil {
		return nil, err
	}
	var last error
	for _, n := range im.Router.cfg.Nodes.Nodes() {
		if n.State == placement.StateLost {
			continue
		}
		out, err := im.Router.client(n).RecordImage(ctx, name)
		if err == nil {
			return out, nil
		}
		if errdefs.Is(err, api.CodeNotImplemented) { // a node that does not record
			continue
		}
		last = fmt.Errorf("node %s: %w", n.Name, err)
		if !errdefs.Is(err, api.CodeConflict) {
			return out, last
		}
	}
	if last == nil {
		last = errdefs.Conflict("no node of the cluster has read %q yet: run its task in a sandbox first", name)
	}
	return nil, last
}

// layerCacheTTL is how long an API server keeps an environment's layer
// digests for placement (a compose is seen by placement within it).
const layerCacheTTL = 5 * time.Second

// LayerCache resolves environments' layer digests for image locality
// (Config.EnvLayers), each answer kept for layerCacheTTL so a create
// costs no etcd read. Names that are no environment are cached as nil too.
type LayerCache struct {
	Store *envstore.Store
	mu    sync.Mutex
	m     map[string]cachedLayers
}

type cachedLayers struct {
	digests []string
	at      time.Time
}

// Layers implements Config.EnvLayers.
func (c *LayerCache) Layers(ctx context.Context, name string) []string {
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if ok && time.Since(e.at) < layerCacheTTL {
		return e.digests
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second) // locality is worth no wait
	defer cancel()
	m, err := c.Store.Get(ctx, name)
	if err != nil && !errdefs.Is(err, api.CodeNotFound) && !errdefs.Is(err, api.CodeInvalidArgument) {
		return nil // etcd did not answer: place without locality, ask again next time
	}
	var ds []string
	for _, l := range m.Layers {
		if l.Digest != "" {
			ds = append(ds, l.Digest)
		}
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) > 10000 {
		c.m = map[string]cachedLayers{}
	}
	c.m[name] = cachedLayers{ds, time.Now()}
	c.mu.Unlock()
	return ds
}

// BuildImage implements session.Images: a Dockerfile build runs on one node
// (its RUN steps are sandboxes there), placed as a container sandbox of the
// build's limits would be. The context streams to the node and the RUN
// output (req.Output) streams back while it builds; the environment it
// writes is in etcd, so every node creates from it. The build cannot be
// placed again once it started reading the context: a node's refusal is the
// answer.
func (im *Images) BuildImage(ctx context.Context, req api.BuildImageRequest, buildContext io.Reader) (api.BuildImageResult, error) {
	r := im.Router
	var node string
	if eng := r.cfg.Engine; eng != nil {
		d, err := eng.Place(ctx, placement.Request{Backend: api.BackendContainer,
			MilliCPU: int64(req.CPU * 1000), MemoryBytes: req.MemoryBytes})
		if err != nil {
			return api.BuildImageResult{}, fmt.Errorf("placing the build: %w", err)
		}
		defer eng.Release(d) // the build's sandboxes count in the node's own reports
		node = d.Node
	} else {
		var err error
		if node, err = r.anyReady(); err != nil {
			return api.BuildImageResult{}, err
		}
	}
	svc, err := r.nodeFor(node, "build")
	if err != nil {
		return api.BuildImageResult{}, err
	}
	r.log.InfoContext(ctx, "dockerfile build placed", "name", req.Name, "node", node)
	return svc.BuildImage(ctx, req, buildContext)
}

// PruneBuildCache implements session.Images: builds, and so build caches,
// are the nodes'; every live node prunes its own and the answer is the sum
// (a node without builds counts nothing).
func (im *Images) PruneBuildCache(ctx context.Context) (api.BuildCachePruned, error) {
	outs, _, err := fanOut(ctx, im.Router, im.Router.cfg.Nodes.Nodes(), "prune build cache",
		func(ctx context.Context, _ string, svc session.Service) (api.BuildCachePruned, error) {
			p, err := svc.PruneBuildCache(ctx)
			if errdefs.Is(err, api.CodeNotImplemented) {
				return api.BuildCachePruned{}, nil
			}
			return p, err
		})
	var sum api.BuildCachePruned
	for _, p := range outs {
		sum.Entries += p.Entries
		sum.Bytes += p.Bytes
		sum.Kept += p.Kept
	}
	return sum, err
}

func (c Cluster) BuildImage(ctx context.Context, req api.BuildImageRequest, buildContext io.Reader) (api.BuildImageResult, error) {
	return c.Envs.BuildImage(ctx, req, buildContext)
}
func (c Cluster) PruneBuildCache(ctx context.Context) (api.BuildCachePruned, error) {
	return c.Envs.PruneBuildCache(ctx)
}
