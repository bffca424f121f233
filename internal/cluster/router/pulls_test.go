package router

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	v1reg "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/agent/agenttest"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc"
	"github.com/dsec-dev/dsec/internal/cluster/noderpc/noderpctest"
	"github.com/dsec-dev/dsec/internal/cluster/placement"
	v1 "github.com/dsec-dev/dsec/internal/frontend/v1"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/pull/pulltest"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// pullCluster is an API server's /v1 (the router over the node RPC) in
// front of node agents on the mock driver, each with a real puller of reg's
// images.
type pullCluster struct {
	cl      *client.Client
	pullers map[string]*pull.Puller
}

func newPullCluster(t *testing.T, reg *registrytest.Registry, names ...string) *pullCluster {
	t.Helper()
	return newPullClusterWith(t, reg, nil, names...)
}

// newPullClusterWith is newPullCluster with each node's puller and image
// store changed by edit.
func newPullClusterWith(t *testing.T, reg *registrytest.Registry, edit func(name string, p *pull.Puller, s *image.Store), names ...string) *pullCluster {
	t.Helper()
	secret := []byte("0123456789abcdef0123456789abcdef")
	pc := &pullCluster{pullers: map[string]*pull.Puller{}}
	view := &fakeView{nodes: map[string]cluster.NodeStatus{}}
	for _, name := range names {
		p := pulltest.New(t, reg, "alice", "pw")
		pc.pullers[name] = p
		mgr := agenttest.New(t, agenttest.Options{Node: name, Config: func(c *agent.Config) {
			c.Images.Refs = p
			if edit != nil {
				edit(name, p, c.Images)
			}
		}})
		url, _ := noderpctest.Serve(t, mgr, noderpc.HandlerOptions{Secret: secret})
		view.nodes[name] = cluster.NodeStatus{State: placement.StateReady, NodeRecord: cluster.NodeRecord{Name: name, Addr: url,
			Backends: []string{mock.Name}, Capacity: placement.Resources{Sandboxes: 100}}}
	}
	eng := placement.New(view, placement.Config{Seed: 1})
	if err := eng.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	rt := New(Config{Nodes: view, Engine: eng, Dial: func(n cluster.NodeStatus) session.Service {
		return noderpc.NewClient(n.Addr, noderpc.ClientOptions{Secret: secret})
	}})
	t.Cleanup(func() { rt.Close() })
	hs := httptest.NewServer(v1.New(rt, v1.Options{Token: "t"}).Handler())
	t.Cleanup(hs.Close)
	pc.cl = client.New(hs.URL, "t", client.WithRetry(0))
	return pc
}

// randomLayer is a layer of one file of n random bytes (it compresses to
// about n bytes).
func randomLayer(t *testing.T, seed uint64, n int) v1reg.Layer {
	body := make([]byte, n)
	rnd := rand.New(rand.NewPCG(seed, seed+1))
	for i := range body {
		body[i] = byte(rnd.Uint32())
	}
	return registrytest.Layer(t, registrytest.Entry{Name: "big", Body: string(body)})
}

// GET /v1/images:pulls through an API server asks every node: a pull
// stalled mid-layer on node b shows there, named b, with its bytes fetched;
// once it ends no pull is in flight anywhere.
func TestImagePullsAcrossNodes(t *testing.T) {
	ctx := t.Context()
	reg := registrytest.Start(t, "alice", "pw")
	pc := newPullCluster(t, reg, "a", "b")
	l := randomLayer(t, 7, 256<<10)
	size, _ := l.Size()
	ref := reg.Host + "/cluster/pulls:1"
	want := reg.Push(t, "cluster/pulls:1", registrytest.Image(t, v1reg.Config{}, l))

	const stallAt = 32 << 10
	reg.Stall(stallAt)
	t.Cleanup(reg.Resume) // on failure too: the registry's Close waits for its stalled requests
	done := make(chan error, 1)
	go func() {
		_, err := pc.pullers["b"].Pull(context.Background(), ref)
		done <- err
	}()
	wctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	var got api.PullProgress
	pc.cl.WatchPull(wctx, ref, 5*time.Millisecond, func(pr api.PullProgress) {
		if pr.FetchedBytes == stallAt {
			got = pr
			stop()
		}
	})
	if got.Node != "b" || got.Digest != want || got.TotalBytes != size || got.Phase != api.PullFetching {
		t.Fatalf("progress through the API server %+v, want node b's pull of %s at %d of %d bytes", got, want, stallAt, size)
	}
	all, err := pc.cl.Pulls(ctx)
	if err != nil || len(all) != 1 || all[0].Node != "b" || all[0].Ref != ref {
		t.Fatalf("pulls in flight in the cluster %+v %v, want b's pull of %s", all, err, ref)
	}
	reg.Resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if all, err := pc.cl.Pulls(ctx); err != nil || len(all) != 0 {
		t.Fatalf("pulls in flight after the pull %+v %v", all, err)
	}
	var ae *api.Error
	if pr, err := pc.cl.PullProgress(ctx, ref); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("progress after the pull: %+v %v, want not_found", pr, err)
	}
}

// A create with wait false through an API server answers at once in state
// pulling; GET through the API server shows the node's pull; a delete
// while it pulls stops it, and the fetch with it. A reference the registry does not have ends in
// state failed with not_found.
func TestCreateWithoutWaitThroughAPIServer(t *testing.T) {
	ctx := t.Context()
	reg := registrytest.Start(t, "alice", "pw")
	pc := newPullCluster(t, reg, "a")
	ref := reg.Host + "/cluster/nowait:1"
	reg.Push(t, "cluster/nowait:1", registrytest.Image(t, v1reg.Config{}, randomLayer(t, 9, 128<<10)))
	const stallAt = 16 << 10
	reg.Stall(stallAt)
	t.Cleanup(reg.Resume)
	noWait := false

	sb, err := pc.cl.Create(ctx, api.CreateSandboxRequest{Backend: mock.Name, Image: ref, Wait: &noWait})
	if err != nil || sb.State != api.StatePulling {
		t.Fatalf("create %+v %v, want state pulling", sb, err)
	}
	testwait.For(t, 20*time.Second, "GET to show the stalled pull", func() bool {
		got, err := pc.cl.Get(ctx, sb.ID)
		return err == nil && got.State == api.StatePulling && got.Pull != nil && got.Pull.FetchedBytes == stallAt
	})
	if err := pc.cl.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("delete while pulling: %v", err)
	}
	var ae *api.Error
	if _, err := pc.cl.Get(ctx, sb.ID); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("GET after delete: %v, want not_found", err)
	}
	reg.Resume()
	// No create waits for the fetch any more: it stopped, and nothing of it
	// was kept.
	testwait.For(t, 20*time.Second, "the fetch to stop", func() bool {
		all, err := pc.cl.Pulls(ctx)
		return err == nil && len(all) == 0
	})
	if pc.pullers["a"].Has(ref) {
		t.Errorf("%s was kept though its only create was deleted mid-fetch", ref)
	}

	missing := reg.Host + "/cluster/missing:1"
	sb, err = pc.cl.Create(ctx, api.CreateSandboxRequest{Backend: mock.Name, Image: missing, Wait: &noWait})
	if err != nil || sb.State != api.StatePulling {
		t.Fatalf("create of a missing reference %+v %v, want state pulling", sb, err)
	}
	var got api.Sandbox
	testwait.For(t, 20*time.Second, "the create to fail", func() bool {
		got, err = pc.cl.Get(ctx, sb.ID)
		return err == nil && got.State == api.StateFailed
	})
	if got.Error == nil || got.Error.Code != api.CodeNotFound {
		t.Fatalf("failed sandbox %+v (error %+v), want not_found", got, got.Error)
	}
	list, err := pc.cl.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != sb.ID || list[0].State != api.StateFailed {
		t.Fatalf("list through the API server %+v %v, want the failed sandbox", list, err)
	}
	if err := pc.cl.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}
