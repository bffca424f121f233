package router

import (
	"context"
	"sort"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// List implements session.Service: every reachable node's sandboxes, sorted by
// creation time. Lost nodes are left out (their sandboxes answer node_lost); a
// node that is registered but does not answer fails the call, so a list is
// never silently short.
func (r *Router) List(ctx context.Context) ([]api.Sandbox, error) {
	lists, _, err := fanOut(ctx, r, r.cfg.Nodes.Nodes(), "list", func(ctx context.Context, _ string, svc session.Service) ([]api.Sandbox, error) {
		return svc.List(ctx)
	})
	if err != nil {
		return nil, err
	}
	var out []api.Sandbox
	for _, l := range lists {
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
	// The router's own groups: the node's trajectories and images are asked
	// of every node, FnCalls placed on one.
	info.Services = nil
	return session.WithServices(info, api.ServiceFnCall, api.ServiceImages, api.ServiceNodes, api.ServiceTrajectories), nil
}
