package router

import (
	"context"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// layerView adds each node's mounted layers to a fakeView's snapshot.
type layerView struct {
	*fakeView
	layers map[string][]string
}

func (v layerView) Snapshot(ctx context.Context) ([]placement.Node, error) {
	ns, err := v.fakeView.Snapshot(ctx)
	for i := range ns {
		ns[i].Layers = v.layers[ns[i].Name]
	}
	return ns, err
}

// TestImageLocality: among equally loaded nodes, a create from an
// environment goes to the node that mounts its layers; other creates spread.
func TestImageLocality(t *testing.T) {
	g := newRig(t, 3, 100, 100)
	src := layerView{g.view, map[string][]string{"n2": {"sha256:aa", "sha256:bb"}}}
	eng := placement.New(src, placement.Config{Seed: 1, K: 3, MaxReplacements: 3})
	if err := eng.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := New(Config{Nodes: g.view, Engine: eng,
		EnvLayers: func(_ context.Context, name string) []string {
			if name == "task" {
				return []string{"sha256:aa", "sha256:bb"}
			}
			return nil
		},
		Dial: func(n cluster.NodeStatus) session.Service { return g.nodes[n.Name] }})
	// Two creates: the second finds n2 one sandbox (0.01) busier, within the
	// tie tolerance, and still takes it for its layers.
	for i := range 2 {
		sb, err := r.Create(context.Background(), api.CreateSandboxRequest{Image: "task"})
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := session.NodeOf(sb.ID); n != "n2" {
			t.Fatalf("create %d from an environment n2 mounts went to %s", i, n)
		}
	}
	seen := map[string]bool{}
	for range 30 {
		sb, err := r.Create(context.Background(), api.CreateSandboxRequest{Image: "debian"})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := session.NodeOf(sb.ID)
		seen[n] = true
	}
	if len(seen) != 3 {
		t.Fatalf("creates of an image no node mounts went to %v only", seen)
	}
}
