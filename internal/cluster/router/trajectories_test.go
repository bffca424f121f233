package router

import (
	"context"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// trajNode is a fake node that keeps trajectories and has a display.
type trajNode struct {
	*fakeNode
	trajs map[string]api.Trajectory
}

func (n *trajNode) ListTrajectories(context.Context) ([]api.Trajectory, error) {
	out := []api.Trajectory{}
	for _, t := range n.trajs {
		out = append(out, t)
	}
	return out, nil
}

func (n *trajNode) GetTrajectory(_ context.Context, id string) (api.Trajectory, error) {
	t, ok := n.trajs[id]
	if !ok {
		return api.Trajectory{}, errdefs.NotFound("trajectory %q not found", id)
	}
	return t, nil
}

func (n *trajNode) DeleteTrajectory(_ context.Context, id string) error {
	if _, ok := n.trajs[id]; !ok {
		return errdefs.NotFound("trajectory %q not found", id)
	}
	delete(n.trajs, id)
	return nil
}

func (n *trajNode) RebuildTrajectory(_ context.Context, id string) (api.RebuildResponse, error) {
	return api.RebuildResponse{Trajectory: id, SandboxID: "sb-1." + n.name}, nil
}

func (n *trajNode) Screenshot(_ context.Context, id string) ([]byte, error) {
	return []byte("png of " + id + " on " + n.name), nil
}

// TestTrajectoriesAndScreenThroughTheRouter: a trajectory is found on the
// node that keeps it, lists join every node's, a lost node's trajectories
// answer node_lost; a screenshot goes to the node the sandbox ID names.
func TestTrajectoriesAndScreenThroughTheRouter(t *testing.T) {
	g := newRig(t, 3, 100, 100)
	tn := map[string]*trajNode{}
	for name, f := range g.nodes {
		tn[name] = &trajNode{fakeNode: f, trajs: map[string]api.Trajectory{"t-" + name: {ID: "t-" + name, SandboxID: "sb-1." + name}}}
	}
	r := New(Config{Nodes: g.view, Engine: g.engine,
		Dial: func(n cluster.NodeStatus) session.Service { return tn[n.Name] }})
	ctx := context.Background()
	for _, name := range []string{"n1", "n2", "n3"} {
		if got, err := r.GetTrajectory(ctx, "t-"+name); err != nil || got.SandboxID != "sb-1."+name {
			t.Errorf("get t-%s: %+v %v", name, got, err)
		}
	}
	if list, err := r.ListTrajectories(ctx); err != nil || len(list) != 3 {
		t.Errorf("list: %+v %v", list, err)
	}
	if rb, err := r.RebuildTrajectory(ctx, "t-n2"); err != nil || rb.SandboxID != "sb-1.n2" {
		t.Errorf("rebuild went to %+v %v, want node n2", rb, err)
	}
	if err := r.DeleteTrajectory(ctx, "t-n1"); err != nil || len(tn["n1"].trajs) != 0 {
		t.Errorf("delete: %v (n1 keeps %v)", err, tn["n1"].trajs)
	}
	if _, err := r.GetTrajectory(ctx, "nope"); !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("unknown trajectory: %v, want not_found", err)
	}
	g.view.set("n3", placement.StateLost)
	if _, err := r.GetTrajectory(ctx, "t-n3"); !errdefs.Is(err, api.CodeNodeLost) {
		t.Errorf("trajectory of a lost node: %v, want node_lost", err)
	}
	if list, err := r.ListTrajectories(ctx); err != nil || len(list) != 1 {
		t.Errorf("list without the lost node: %+v %v", list, err)
	}
	png, err := r.Screenshot(ctx, "sb-00000001.n2")
	if err != nil || string(png) != "png of sb-00000001.n2 on n2" {
		t.Errorf("screenshot: %q %v", png, err)
	}
	if _, err := r.Screenshot(ctx, "sb-00000001.n3"); !errdefs.Is(err, api.CodeNodeLost) {
		t.Errorf("screenshot on a lost node: %v", err)
	}
	if _, err := r.SendInput(ctx, "sb-00000001.n2", api.InputRequest{Text: "x"}); !errdefs.Is(err, api.CodeNotImplemented) {
		t.Errorf("input on a node without it: %v, want not_implemented", err)
	}
}
