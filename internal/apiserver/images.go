package apiserver

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/envstore"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/noderpc"
	"github.com/dsec-dev/dsec/internal/placement"
	"github.com/dsec-dev/dsec/internal/server"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Images serves /v1/images in a cluster (server.ImageLister and
// server.ImageManager): environments and the layer index live in etcd
// (envstore.EtcdState), so a compose through any API server serves every
// node; the layer accounting (mounted, fetched, cache hits, sandboxes) is each
// node's own, asked of every ready node and summed.
type Images struct {
	Store  *envstore.Store
	Router *Router
}

var (
	_ server.ImageLister  = (*Images)(nil)
	_ server.ImageManager = (*Images)(nil)
)

// readyImageNodes returns the image service of every ready node.
func (im *Images) readyImageNodes() []nodeImages {
	var out []nodeImages
	for _, n := range im.Router.cfg.Nodes.Nodes() {
		if n.State == placement.StateLost {
			continue
		}
		if d, ok := im.Router.client(n).(noderpc.ImageDescriber); ok {
			out = append(out, nodeImages{n.Name, d})
		}
	}
	return out
}

type nodeImages struct {
	name string
	svc  noderpc.ImageDescriber
}

// fanOut runs f on every live node at once and returns the answers of those
// that answered.
func fanOut[T any](ctx context.Context, im *Images, f func(context.Context, noderpc.ImageDescriber) (T, error)) ([]T, []error) {
	nodes := im.readyImageNodes()
	vals := make([]T, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals[i], errs[i] = f(ctx, n.svc)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("node %s: %w", n.name, errs[i])
			}
		}()
	}
	wg.Wait()
	var ok []T
	var bad []error
	for i := range nodes {
		if errs[i] == nil {
			ok = append(ok, vals[i])
		} else {
			bad = append(bad, errs[i])
		}
	}
	return ok, bad
}

// merge adds node view b's accounting to a (the same image on another node).
func merge(a *api.Image, b api.Image) {
	if len(a.Layers) != len(b.Layers) {
		return // the environment changed between the two answers: keep a
	}
	a.BytesFetched += b.BytesFetched
	for i := range a.Layers {
		x, y := &a.Layers[i], b.Layers[i]
		if x.Digest != y.Digest {
			continue
		}
		x.BytesFetched += y.BytesFetched
		x.CacheHits += y.CacheHits
		x.CacheMisses += y.CacheMisses
		x.Sandboxes += y.Sandboxes
		x.Prefetched += y.Prefetched
		x.Mounted = x.Mounted || y.Mounted
		x.ChunkSize = max(x.ChunkSize, y.ChunkSize)
	}
}

// envView is environment name as etcd has it, without node accounting.
func (im *Images) envView(ctx context.Context, name string) (api.Image, error) {
	img, err := envstore.Images{Store: im.Store, DefaultSpec: im.Store.Spec}.ResolveEnv(name)
	if err != nil {
		return api.Image{}, err
	}
	return img.View(nil, false), nil
}

// Images implements server.ImageLister: every node's images (directory images
// and environments), accounting summed, and every environment in etcd.
func (im *Images) Images(ctx context.Context) ([]api.Image, error) {
	lists, _ := fanOut(ctx, im, func(ctx context.Context, d noderpc.ImageDescriber) ([]api.Image, error) { return d.Images(ctx) })
	byName := map[string]*api.Image{}
	for _, l := range lists {
		for _, img := range l {
			if cur, ok := byName[img.Name]; ok {
				merge(cur, img)
			} else {
				img := img
				byName[img.Name] = &img
			}
		}
	}
	names, err := im.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := byName[n]; ok {
			continue
		}
		if v, err := im.envView(ctx, n); err == nil {
			byName[n] = &v
		}
	}
	out := make([]api.Image, 0, len(byName))
	for _, v := range byName {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Image implements server.ImageLister: the image as the nodes describe it,
// accounting summed; an environment no node answers for comes from etcd.
func (im *Images) Image(ctx context.Context, name string) (api.Image, error) {
	views, errs := fanOut(ctx, im, func(ctx context.Context, d noderpc.ImageDescriber) (api.Image, error) { return d.Image(ctx, name) })
	if len(views) > 0 {
		v := views[0]
		for _, o := range views[1:] {
			merge(&v, o)
		}
		return v, nil
	}
	v, err := im.envView(ctx, name)
	if err == nil || !errdefs.Is(err, api.CodeNotFound) {
		return v, err
	}
	for _, e := range errs {
		if !errdefs.Is(e, api.CodeNotFound) {
			return api.Image{}, e // a node failed: say so rather than not_found
		}
	}
	return api.Image{}, errdefs.NotFound("no image or environment named %q in the cluster", name)
}

// Compose implements server.ImageManager: the environment is written to etcd
// (its layers checked in the cluster's blob store), for every node at once.
func (im *Images) Compose(ctx context.Context, req api.ComposeImageRequest) (api.Image, error) {
	if _, err := im.Store.Compose(ctx, req.Name, req.Base, req.Toolkits, req.Workspace); err != nil {
		return api.Image{}, err
	}
	return im.envView(ctx, req.Name)
}

// RemoveImage implements server.ImageManager: refused while a sandbox on any
// node uses the environment (the nodes' marks in etcd, checked in the same
// transaction as the delete).
func (im *Images) RemoveImage(ctx context.Context, name string) error {
	return im.Store.Remove(ctx, name)
}

// RecordImage implements server.ImageManager: the chunks read on a node whose
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
		rec, ok := im.Router.client(n).(noderpc.ImageRecorder)
		if !ok {
			continue
		}
		out, err := rec.RecordImage(ctx, name)
		if err == nil {
			return out, nil
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
// (RouterConfig.EnvLayers), each answer kept for layerCacheTTL so a create
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

// Layers implements RouterConfig.EnvLayers.
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
