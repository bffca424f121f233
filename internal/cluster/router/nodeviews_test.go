package router

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Images: a node's image list, as the node agent answers it.
func (f *fakeNode) Images(context.Context) ([]api.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.images), nil
}

// SandboxUsage: each sandbox's memory is its node's number times 1 MiB; it
// records the IDs it was asked for.
func (f *fakeNode) SandboxUsage(_ context.Context, ids []string) ([]api.SandboxUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.usageAsks = append(f.usageAsks, ids)
	var n int
	fmt.Sscanf(f.name, "n%d", &n)
	var out []api.SandboxUsage
	for id := range f.sbs {
		if len(ids) == 0 || slices.Contains(ids, id) {
			out = append(out, api.SandboxUsage{ID: id, State: api.StateRunning, MemoryBytes: int64(n) << 20, CPUSeconds: -1})
		}
	}
	return out, nil
}

// The images view merges every live node's images by name, with each node's
// bytes fetched; the layers' counters add up.
func TestImagesAcrossNodes(t *testing.T) {
	g := newRig(t, 3, 100, 100)
	layer := func(fetched int64, mounted bool, sbs int) api.ImageLayer {
		return api.ImageLayer{Digest: "sha256:base", Role: "base", Size: 1000, BytesFetched: fetched, Mounted: mounted, Sandboxes: sbs}
	}
	g.nodes["n1"].images = []api.Image{
		{Name: "py", Kind: "layered", Size: 1000, BytesFetched: 400, Layers: []api.ImageLayer{layer(400, true, 2)}},
		{Name: "debian", Kind: "directory", Default: true},
	}
	g.nodes["n2"].images = []api.Image{{Name: "py", Kind: "layered", Size: 1000, BytesFetched: 100, Layers: []api.ImageLayer{layer(100, false, 0)}}}
	g.nodes["n3"].images = []api.Image{{Name: "only-on-a-lost-node", Kind: "directory"}}
	g.view.set("n3", placement.StateLost)
	imgs, err := g.r.Images(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 2 || imgs[0].Name != "debian" || imgs[1].Name != "py" {
		t.Fatalf("images %+v, want debian and py", imgs)
	}
	if d := imgs[0]; !d.Default || len(d.Nodes) != 1 || d.Nodes[0].Node != "n1" {
		t.Errorf("debian %+v", d)
	}
	py := imgs[1]
	if py.Size != 1000 || py.BytesFetched != 0 || len(py.Nodes) != 2 ||
		py.Nodes[0] != (api.ImageNode{Node: "n1", BytesFetched: 400, MountedLayers: 1}) ||
		py.Nodes[1] != (api.ImageNode{Node: "n2", BytesFetched: 100}) {
		t.Errorf("py %+v", py)
	}
	if l := py.Layers[0]; l.BytesFetched != 500 || !l.Mounted || l.Sandboxes != 2 {
		t.Errorf("py's layer %+v, want the nodes' counters added up", l)
	}
	if g.nodes["n1"].images[0].BytesFetched != 400 || g.nodes["n1"].images[0].Layers[0].BytesFetched != 400 {
		t.Error("merging changed a node's answer")
	}
	if img, err := g.r.Image(t.Context(), "py"); err != nil || len(img.Nodes) != 2 {
		t.Errorf("image py: %+v %v", img, err)
	}
	if _, err := g.r.Image(t.Context(), "only-on-a-lost-node"); !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("an image only a lost node has: %v, want not_found", err)
	}
}

// Per-sandbox use is routed by sandbox ID: each node is asked for its own
// sandboxes only, nodes without any are not asked, IDs of unknown or lost
// nodes are left out; without IDs every live node answers for all of its.
func TestUsageRoutedByID(t *testing.T) {
	g := newRig(t, 3, 100, 100)
	ctx := context.Background()
	byNode := map[string][]string{}
	for _, n := range []string{"n1", "n1", "n2", "n3"} {
		sb, err := g.r.Create(ctx, api.CreateSandboxRequest{Node: n})
		if err != nil {
			t.Fatal(err)
		}
		byNode[n] = append(byNode[n], sb.ID)
	}
	g.view.set("n3", placement.StateLost)
	ask := []string{byNode["n1"][1], byNode["n2"][0], byNode["n3"][0], "sb-0123456789abcdef.n9", "nonsense"}
	us, err := g.r.SandboxUsage(ctx, ask)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, u := range us {
		got[u.ID] = u.MemoryBytes
	}
	want := map[string]int64{byNode["n1"][1]: 1 << 20, byNode["n2"][0]: 2 << 20}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("usage %v, want %v", got, want)
	}
	if a := g.nodes["n1"].usageAsks; len(a) != 1 || !slices.Equal(a[0], []string{byNode["n1"][1]}) {
		t.Errorf("n1 was asked %v", a)
	}
	if a := g.nodes["n3"].usageAsks; len(a) != 0 {
		t.Errorf("the lost n3 was asked %v", a)
	}
	all, err := g.r.SandboxUsage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, u := range all {
		ids = append(ids, u.ID)
	}
	sort.Strings(ids)
	wantAll := append(slices.Clone(byNode["n1"]), byNode["n2"]...)
	sort.Strings(wantAll)
	if !slices.Equal(ids, wantAll) {
		t.Errorf("usage of all: %v, want n1's and n2's %v", ids, wantAll)
	}
}

// Image: a node pulls a registry reference unless it is marked to fail
// (fail: unavailable, as a node whose registry is down).
func (f *fakeNode) Image(_ context.Context, name string) (api.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !strings.Contains(name, ":") {
		return api.Image{}, errdefs.NotFound("no image %q", name)
	}
	if f.fail {
		return api.Image{}, errdefs.New(api.CodeUnavailable, "registry down")
	}
	img := api.Image{Name: name, Kind: "layered", Ref: "reg.example/" + name, Digest: "sha256:aa", BytesFetched: 7}
	f.images = append(f.images, img)
	return img, nil
}

// A reference is pulled on every live node; the answer names the nodes that
// have it; a node that could not is left out; none could: its error.
func TestPullImageOnEveryNode(t *testing.T) {
	g := newRig(t, 3, 100, 100)
	g.nodes["n2"].fail = true
	g.view.set("n3", placement.StateLost)
	c := &Images{Router: g.r}
	img, err := c.Image(t.Context(), "tasks/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != "sha256:aa" || len(img.Nodes) != 1 || img.Nodes[0].Node != "n1" {
		t.Fatalf("pulled %+v, want it on n1 only", img)
	}
	if len(g.nodes["n3"].images) != 0 {
		t.Error("a lost node was asked")
	}
	g.nodes["n1"].fail = true
	if _, err := c.Image(t.Context(), "tasks/app:v1"); !errdefs.Is(err, api.CodeUnavailable) {
		t.Fatalf("no node could pull: %v, want unavailable", err)
	}
}
