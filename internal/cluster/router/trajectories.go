package router

import (
	"context"
	"sync"

	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The trajectory log in a cluster: a step is logged on the node of its
// sandbox (the router forwards the step tag with the call, the node's
// trajectory decorator logs or replays it), so a trajectory lives on one node.
// The trajectory API asks the nodes: a list fans out to every ready node, a
// trajectory by ID is looked up on each until one has it. While a node is lost
// its trajectories cannot be read: a trajectory no reachable node has answers
// node_lost if some node is lost, not_found otherwise.

var _ session.Trajectories = (*Router)(nil)

// trajNodes returns the trajectory API of every node that is not lost, and
// the names of the lost ones.
func (r *Router) trajNodes() (apis []session.Trajectories, names []string, lost []string) {
	for _, n := range r.cfg.Nodes.Nodes() {
		if n.State == placement.StateLost {
			lost = append(lost, n.Name)
			continue
		}
		apis = append(apis, r.client(n))
		names = append(names, n.Name)
	}
	return apis, names, lost
}

// ListTrajectories implements session.Trajectories: every reachable node's
// trajectories (a node that fails to answer fails the list).
func (r *Router) ListTrajectories(ctx context.Context) ([]api.Trajectory, error) {
	apis, names, _ := r.trajNodes()
	lists := make([][]api.Trajectory, len(apis))
	errs := make([]error, len(apis))
	var wg sync.WaitGroup
	for i, t := range apis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = t.ListTrajectories(ctx)
		}()
	}
	wg.Wait()
	out := []api.Trajectory{}
	for i := range apis {
		if errdefs.Is(errs[i], api.CodeNotImplemented) { // a node without a trajectory log
			continue
		}
		if errs[i] != nil {
			return nil, errdefs.Wrap(errdefs.CodeOf(errs[i]), errs[i], "trajectories of node %s", names[i])
		}
		out = append(out, lists[i]...)
	}
	return out, nil
}

// findTrajectory runs f on the node that has trajectory id.
func findTrajectory[T any](ctx context.Context, r *Router, id string, f func(context.Context, session.Trajectories) (T, error)) (T, error) {
	var zero T
	apis, _, lost := r.trajNodes()
	for _, t := range apis {
		if _, err := t.GetTrajectory(ctx, id); err != nil {
			if errdefs.Is(err, api.CodeNotFound) || errdefs.Is(err, api.CodeNotImplemented) {
				continue
			}
			return zero, err
		}
		return f(ctx, t)
	}
	if len(lost) > 0 {
		return zero, errdefs.New(api.CodeNodeLost, "trajectory %q: no reachable node has it, and node(s) %v are lost (their lease expired); a lost node's trajectories answer again when it is back", id, lost)
	}
	return zero, errdefs.NotFound("trajectory %q not found", id)
}

// GetTrajectory implements session.Trajectories.
func (r *Router) GetTrajectory(ctx context.Context, id string) (api.Trajectory, error) {
	return findTrajectory(ctx, r, id, func(ctx context.Context, t session.Trajectories) (api.Trajectory, error) {
		return t.GetTrajectory(ctx, id)
	})
}

// DeleteTrajectory implements session.Trajectories.
func (r *Router) DeleteTrajectory(ctx context.Context, id string) error {
	_, err := findTrajectory(ctx, r, id, func(ctx context.Context, t session.Trajectories) (struct{}, error) {
		return struct{}{}, t.DeleteTrajectory(ctx, id)
	})
	return err
}

// RebuildTrajectory implements session.Trajectories: the node that keeps the
// trajectory creates the replacement sandbox.
func (r *Router) RebuildTrajectory(ctx context.Context, id string) (api.RebuildResponse, error) {
	return findTrajectory(ctx, r, id, func(ctx context.Context, t session.Trajectories) (api.RebuildResponse, error) {
		return t.RebuildTrajectory(ctx, id)
	})
}
