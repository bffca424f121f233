package pull_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/pull/pulltest"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
)

// TestClusterFetchesEachLayerOnce: three nodes (pullers with records of
// their own) share one blob store and claim layers in a real etcd; 60
// concurrent pulls of a never-seen image spread over them fetch each layer
// from the registry exactly once, and every node ends with the image.
func TestClusterFetchesEachLayerOnce(t *testing.T) {
	_, cli := apptest.Etcd(t)
	reg := registrytest.Start(t, "alice", "pw")
	// Each layer slow enough that the nodes' pulls overlap.
	reg.Slow(50 * time.Millisecond)
	layers := []v1.Layer{
		registrytest.Layer(t, E{Name: "base/f", Body: "base"}),
		registrytest.Layer(t, E{Name: "mid/f", Body: "mid"}),
		registrytest.Layer(t, E{Name: "top/f", Body: "top"}),
	}
	ref := reg.Host + "/cluster/once:1"
	img := registrytest.Image(t, v1.Config{Env: []string{"ONCE=1"}}, layers...)
	want := reg.Push(t, "cluster/once:1", img)
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}

	spec := "dir:" + filepath.Join(t.TempDir(), "shared-blobs")
	blobs, err := blob.Open(spec, true)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*pull.Puller
	for i := range 3 {
		p := pulltest.New(t, reg, "alice", "pw")
		p.Blobs, p.Spec = blobs, spec
		p.Claims = &pull.EtcdClaims{Client: cli, Prefix: "/once/", Node: fmt.Sprintf("n%d", i)}
		nodes = append(nodes, p)
	}
	const n = 60
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]pull.Pulled, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = nodes[i%3].Pull(context.Background(), ref) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	gets := reg.BlobGets()
	for i, l := range layers {
		dg, _ := l.Digest()
		if gets[dg.String()] != 1 {
			t.Errorf("layer %d (%s) fetched from the registry %d times, want once in the cluster", i, dg, gets[dg.String()])
		}
	}
	// The config too: one node fetches it into the shared blob store.
	if n := gets[cfgName.String()]; n != 1 {
		t.Errorf("config %s fetched from the registry %d times, want once in the cluster", cfgName, n)
	}
	var fetched int64
	for _, p := range nodes {
		fetched += p.LayersFetched.Load()
	}
	if fetched != int64(len(layers)) {
		t.Errorf("%d layer fetches over the nodes, want %d", fetched, len(layers))
	}
	first := got[0].Image.Layers
	for i, pl := range got {
		if pl.Digest != want || len(pl.Image.Layers) != len(layers) {
			t.Fatalf("pull %d: %+v, want %s with %d layers", i, pl, want, len(layers))
		}
		for j, l := range pl.Image.Layers {
			if l.Digest != first[j].Digest {
				t.Fatalf("pull %d layer %d is %s, pull 0's %s: one conversion, one blob", i, j, l.Digest, first[j].Digest)
			}
		}
	}
	for i, p := range nodes {
		if !p.Has(ref) {
			t.Errorf("node %d does not have the image after its pulls", i)
		}
	}
	for i, pl := range got[:3] {
		if pl.Image.Config == nil || len(pl.Image.Config.Env) != 1 || pl.Image.Config.Env[0] != "ONCE=1" {
			t.Errorf("node %d: image config %+v, want Env ONCE=1", i, pl.Image.Config)
		}
	}
}

// A claim whose node fails (done without a layer) or dies (its lease
// revoked) passes to a waiting node; a recorded layer whose blob is gone
// from the store is claimed again.
func TestLayerClaimPassesOn(t *testing.T) {
	url, cli := apptest.Etcd(t)
	ctx := context.Background()
	a := &pull.EtcdClaims{Client: cli, Prefix: "/pass/", Node: "a", TTL: 2}
	b := &pull.EtcdClaims{Client: cli, Prefix: "/pass/", Node: "b", TTL: 2}
	const dg = "sha256:0123"
	yes := func(image.Layer) bool { return true }
	el, doneA, err := a.Claim(ctx, dg, yes)
	if err != nil || el != nil {
		t.Fatalf("first claim: %v %v", el, err)
	}
	type claim struct {
		el   *image.Layer
		done func(*image.Layer) error
		err  error
	}
	wait := func(c *pull.EtcdClaims, have func(image.Layer) bool) chan claim {
		ch := make(chan claim, 1)
		go func() {
			el, done, err := c.Claim(ctx, dg, have)
			ch <- claim{el, done, err}
		}()
		return ch
	}
	bc := wait(b, yes)
	select {
	case c := <-bc:
		t.Fatalf("b claimed while a holds the claim: %+v", c)
	case <-time.After(200 * time.Millisecond):
	}
	if err := doneA(nil); err != nil { // a failed: b goes on
		t.Fatal(err)
	}
	c := <-bc
	if c.err != nil || c.el != nil || c.done == nil {
		t.Fatalf("b after a failed: %+v, want the claim", c)
	}
	made := image.Layer{Digest: "sha256:erofs", Size: 42}
	if err := c.done(&made); err != nil {
		t.Fatal(err)
	}
	if el, done, err := a.Claim(ctx, dg, yes); err != nil || el == nil || el.Digest != made.Digest || done != nil {
		t.Fatalf("a after b made it: %+v %v, want b's layer", el, err)
	}
	// The blob is gone from a's store: a claims it again.
	el, doneA, err = a.Claim(ctx, dg, func(image.Layer) bool { return false })
	if err != nil || el != nil || doneA == nil {
		t.Fatalf("a with the blob gone: %+v %v, want the claim", el, err)
	}
	if err := doneA(nil); err != nil {
		t.Fatal(err)
	}

	// A node that dies holding a claim (its client gone, the lease not
	// renewed) loses it within the TTL.
	const dg2 = "sha256:4567"
	dcli, err := cluster.Connect(ctx, cluster.ClientConfig{Endpoints: url})
	if err != nil {
		t.Fatal(err)
	}
	dead := &pull.EtcdClaims{Client: dcli, Prefix: "/pass/", Node: "dead", TTL: 2}
	if el, done, err := dead.Claim(ctx, dg2, yes); err != nil || el != nil || done == nil {
		t.Fatalf("claim of the node to die: %+v %v", el, err)
	}
	dcli.Close()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	el, doneB, err := b.Claim(wctx, dg2, yes)
	if err != nil || el != nil || doneB == nil {
		t.Fatalf("b after the claimer died: %+v %v, want the claim", el, err)
	}
	t.Logf("the dead node's claim passed on after %s (TTL 2 s)", time.Since(start))
	if err := doneB(nil); err != nil {
		t.Fatal(err)
	}
}
