package router

import (
	"context"
	"io"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Drainer sets drain flags (cluster.Admin).
type Drainer interface {
	SetDrain(ctx context.Context, node string, drain bool) error
}

// ListNodes implements session.Service.
func (r *Router) ListNodes(ctx context.Context) ([]api.Node, error) {
	ns := r.cfg.Nodes.Nodes()
	out := make([]api.Node, len(ns))
	for i, n := range ns {
		out[i] = apiNode(n)
	}
	return out, nil
}

// SetDrain implements session.Service.
func (r *Router) SetDrain(ctx context.Context, node string, drain bool) error {
	if r.cfg.Drainer == nil {
		return errNoNodes
	}
	return r.cfg.Drainer.SetDrain(ctx, node, drain)
}

// nodeRemover removes a lost node's records (the API server's node admin).
type nodeRemover interface {
	RemoveNode(ctx context.Context, node string) (api.RemoveNodeResponse, error)
}

// RemoveNode implements session.Service: a lost node leaves the cluster (see
// the Drainer's RemoveNode); its sandboxes are reported gone.
func (r *Router) RemoveNode(ctx context.Context, node string) (api.RemoveNodeResponse, error) {
	rm, ok := r.cfg.Drainer.(nodeRemover)
	if !ok {
		return api.RemoveNodeResponse{}, errdefs.New(api.CodeNotImplemented, "this API server cannot remove nodes")
	}
	last, _ := r.cfg.Nodes.Node(node)
	out, err := rm.RemoveNode(ctx, node)
	if err != nil {
		return out, err
	}
	out.Sandboxes = last.Load.Sandboxes
	r.mu.Lock()
	if c, ok := r.clients[node]; ok {
		if cl, isCloser := c.svc.(io.Closer); isCloser {
			_ = cl.Close()
		}
		delete(r.clients, node)
	}
	r.mu.Unlock()
	r.log.Info("node removed", "node", node, "sandboxes", out.Sandboxes, "env_marks", out.EnvMarks, "request_claims", out.RequestClaims)
	return out, nil
}

func apiNode(n cluster.NodeStatus) api.Node {
	return api.Node{
		Name: n.Name, Addr: n.Addr, State: string(n.State), Backends: n.Backends, Labels: n.Labels,
		MaxSandboxes: n.Capacity.Sandboxes, Sandboxes: n.Load.Sandboxes, Load: placement.Score(n.Capacity, n.Load),
		MaxFnCalls: n.FnCallCapacity, FnCalls: n.FnCallLoad,
		Version: n.Version, StartedAt: n.StartedAt, ReportedAt: n.ReportedAt,
	}
}
