package apiserver

import (
	"context"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/placement"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Drainer sets drain flags (cluster.Admin).
type Drainer interface {
	SetDrain(ctx context.Context, node string, drain bool) error
}

// ListNodes implements server.NodeAdmin.
func (r *Router) ListNodes(ctx context.Context) ([]api.Node, error) {
	ns := r.cfg.Nodes.Nodes()
	out := make([]api.Node, len(ns))
	for i, n := range ns {
		out[i] = apiNode(n)
	}
	return out, nil
}

// SetDrain implements server.NodeAdmin.
func (r *Router) SetDrain(ctx context.Context, node string, drain bool) error {
	if r.cfg.Drainer == nil {
		return errNoNodes
	}
	return r.cfg.Drainer.SetDrain(ctx, node, drain)
}

func apiNode(n cluster.NodeStatus) api.Node {
	return api.Node{
		Name: n.Name, Addr: n.Addr, State: string(n.State), Backends: n.Backends, Labels: n.Labels,
		MaxSandboxes: n.Capacity.Sandboxes, Sandboxes: n.Load.Sandboxes, Load: placement.Score(n.Capacity, n.Load),
		MaxFnCalls: n.FnCallCapacity, FnCalls: n.FnCallLoad,
		Version: n.Version, StartedAt: n.StartedAt, ReportedAt: n.ReportedAt,
	}
}
