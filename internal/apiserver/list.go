package apiserver

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/dsec-dev/dsec/internal/placement"
	"github.com/dsec-dev/dsec/pkg/api"
)

// List implements session.Service: every reachable node's sandboxes, sorted by
// creation time. Lost nodes are left out (their sandboxes answer node_lost); a
// node that is registered but does not answer fails the call, so a list is
// never silently short.
func (r *Router) List(ctx context.Context) ([]api.Sandbox, error) {
	nodes := r.cfg.Nodes.Nodes()
	lists := make([][]api.Sandbox, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n.State == placement.StateLost {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = r.client(n).List(ctx)
		}()
	}
	wg.Wait()
	var out []api.Sandbox
	for i, l := range lists {
		if errs[i] != nil {
			return nil, fmt.Errorf("list: node %s: %w", nodes[i].Name, errs[i])
		}
		out = append(out, l...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Info implements session.Service: a ready node's info (images, backends),
// named after the cluster tier.
func (r *Router) Info(ctx context.Context) (api.Info, error) {
	name, err := r.anyReady()
	if err != nil {
		return api.Info{}, err
	}
	svc, err := r.nodeFor(name, "info")
	if err != nil {
		return api.Info{}, err
	}
	info, err := svc.Info(ctx)
	if err != nil {
		return api.Info{}, err
	}
	info.Node = "apiserver (via " + name + ")"
	return info, nil
}
