package router

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// fanOut runs f on every node that is not lost, in parallel, and returns the
// answers by node in nodes' order; the first node that fails fails the call,
// so an answer is never silently short (lost nodes are left out: their
// sandboxes answer node_lost).
func fanOut[T any](ctx context.Context, r *Router, nodes []cluster.NodeStatus, what string,
	f func(ctx context.Context, node string, svc session.Service) (T, error)) ([]T, []string, error) {
	var live []cluster.NodeStatus
	for _, n := range nodes {
		if n.State != placement.StateLost {
			live = append(live, n)
		}
	}
	out := make([]T, len(live))
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, n := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = f(ctx, n.Name, r.client(n))
		}()
	}
	wg.Wait()
	names := make([]string, len(live))
	for i, n := range live {
		if errs[i] != nil {
			return nil, nil, fmt.Errorf("%s: node %s: %w", what, n.Name, errs[i])
		}
		names[i] = n.Name
	}
	return out, names, nil
}

// Images: every live node's images merged by
// name, with each node's copy in Nodes (nodes in name order).
func (r *Router) Images(ctx context.Context) ([]api.Image, error) {
	nodes := r.cfg.Nodes.Nodes()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	lists, names, err := fanOut(ctx, r, nodes, "images", func(ctx context.Context, _ string, svc session.Service) ([]api.Image, error) {
		return svc.Images(ctx)
	})
	if err != nil {
		return nil, err
	}
	return mergeImages(lists, names), nil
}

// mergeImages merges the nodes' image lists (lists[i] is node names[i]'s).
func mergeImages(lists [][]api.Image, names []string) []api.Image {
	byName := map[string]int{}
	var out []api.Image
	for i, l := range lists {
		for _, img := range l {
			on := api.ImageNode{Node: names[i], BytesFetched: img.BytesFetched}
			for _, ly := range img.Layers {
				if ly.Mounted {
					on.MountedLayers++
				}
			}
			j, seen := byName[img.Name]
			if !seen {
				j = len(out)
				byName[img.Name] = j
				img.BytesFetched = 0
				img.Layers = append([]api.ImageLayer(nil), img.Layers...)
				img.Nodes = []api.ImageNode{on}
				out = append(out, img)
				continue
			}
			m := &out[j]
			m.Default = m.Default || img.Default
			m.Nodes = append(m.Nodes, on)
			for k := range m.Layers {
				if k >= len(img.Layers) || img.Layers[k].Digest != m.Layers[k].Digest {
					continue // the same name holds other layers on this node
				}
				add, ml := img.Layers[k], &m.Layers[k]
				ml.BytesFetched += add.BytesFetched
				ml.CacheHits += add.CacheHits
				ml.CacheMisses += add.CacheMisses
				ml.Sandboxes += add.Sandboxes
				ml.Prefetched += add.Prefetched
				ml.Mounted = ml.Mounted || add.Mounted
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Image implements session.Service: one image as Images merges it.
func (r *Router) Image(ctx context.Context, name string) (api.Image, error) {
	imgs, err := r.Images(ctx)
	if err != nil {
		return api.Image{}, err
	}
	for _, img := range imgs {
		if img.Name == name {
			return img, nil
		}
	}
	return api.Image{}, errdefs.NotFound("image %q is on no node of the cluster", name)
}

// SandboxUsage: each sandbox's use as its node
// reads it. With ids, each node is asked for its own (IDs of no node of the
// cluster, or of a lost one, are left out); without, every live node for all
// of its sandboxes.
func (r *Router) SandboxUsage(ctx context.Context, ids []string) ([]api.SandboxUsage, error) {
	var nodes []cluster.NodeStatus
	byNode := map[string][]string{} // with ids: each node's
	if len(ids) == 0 {
		nodes = r.cfg.Nodes.Nodes()
	} else {
		for _, id := range ids {
			name, ok := session.NodeOf(id)
			if !ok {
				continue
			}
			if _, seen := byNode[name]; !seen {
				n, known := r.cfg.Nodes.Node(name)
				if !known {
					continue
				}
				nodes = append(nodes, n)
			}
			byNode[name] = append(byNode[name], id)
		}
		if len(nodes) == 0 {
			return []api.SandboxUsage{}, nil
		}
	}
	lists, _, err := fanOut(ctx, r, nodes, "usage", func(ctx context.Context, node string, svc session.Service) ([]api.SandboxUsage, error) {
		return svc.SandboxUsage(ctx, byNode[node])
	})
	if err != nil {
		return nil, err
	}
	out := []api.SandboxUsage{}
	for _, l := range lists {
		out = append(out, l...)
	}
	return out, nil
}

// ImagePulls implements session.Service: every live node's pulls in flight
// (ref set: only ref's), by node name and then reference.
func (r *Router) ImagePulls(ctx context.Context, ref string) ([]api.PullProgress, error) {
	nodes := r.cfg.Nodes.Nodes()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	lists, names, err := fanOut(ctx, r, nodes, "image pulls", func(ctx context.Context, _ string, svc session.Service) ([]api.PullProgress, error) {
		return svc.ImagePulls(ctx, ref)
	})
	if err != nil {
		return nil, err
	}
	out := []api.PullProgress{}
	for i, l := range lists {
		for _, pr := range l {
			pr.Node = names[i]
			out = append(out, pr)
		}
	}
	return out, nil
}

// isReference reports whether name is a registry reference (images.IsReference:
// a '/', ':' or '@'), never an environment name.
func isReference(name string) bool { return strings.ContainsAny(name, "/:@") }

// PullImage asks every live node to fetch registry reference ref (a node
// describes a reference by pulling it): the image as the first node that
// has it describes it, with the nodes that have it. It fails only if no
// node could, with the first node's error.
func (r *Router) PullImage(ctx context.Context, ref string) (api.Image, error) {
	var nodes []cluster.NodeStatus
	for _, n := range r.cfg.Nodes.Nodes() {
		if n.State != placement.StateLost {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return api.Image{}, errdefs.New(api.CodeUnavailable, "no live node to pull %s", ref)
	}
	imgs := make([]api.Image, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			imgs[i], errs[i] = r.client(n).Image(ctx, ref)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("node %s: %w", n.Name, errs[i])
			}
		})
	}
	wg.Wait()
	var out *api.Image
	var have []api.ImageNode
	for i := range nodes {
		if errs[i] != nil {
			continue
		}
		if out == nil {
			out = &imgs[i]
		}
		have = append(have, api.ImageNode{Node: nodes[i].Name, BytesFetched: imgs[i].BytesFetched})
	}
	if out == nil {
		return api.Image{}, errs[0]
	}
	out.Nodes, out.BytesFetched = have, 0
	return *out, nil
}
