package pull_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/pull/pulltest"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// sharedNodes is n pullers of reg's images that share one blob store and
// claim in a real etcd (a cluster's nodes), each signing in to reg as
// user with pass (the node's own credentials).
func sharedNodes(t *testing.T, reg *registrytest.Registry, n int, user, pass string) []*pull.Puller {
	t.Helper()
	_, cli := apptest.Etcd(t)
	spec := "dir:" + filepath.Join(t.TempDir(), "shared-blobs")
	blobs, err := blob.Open(spec, true)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*pull.Puller
	for i := range n {
		p := pulltest.New(t, reg, user, pass)
		p.Blobs, p.Spec = blobs, spec
		p.Claims = &pull.EtcdClaims{Client: cli, Prefix: "/manifests/", Node: fmt.Sprintf("n%d", i)}
		nodes = append(nodes, p)
	}
	return nodes
}

// multiPlatform pushes a two-platform index (this machine's and another)
// as repo:1 and returns its reference, its digest and the digest of the
// image manifest for this machine.
func multiPlatform(t *testing.T, reg *registrytest.Registry, repo string) (ref, idxDg, imgDg string) {
	other := "linux/s390x"
	if runtime.GOARCH == "s390x" {
		other = "linux/amd64"
	}
	mine := registrytest.Image(t, v1.Config{Env: []string{"MINE=1"}}, registrytest.Layer(t, E{Name: "mine/f", Body: "mine"}))
	theirs := registrytest.Image(t, v1.Config{Env: []string{"THEIRS=1"}}, registrytest.Layer(t, E{Name: "theirs/f", Body: "theirs"}))
	idxDg = reg.PushIndex(t, repo+":1", registrytest.Index(t, map[string]v1.Image{"linux/" + runtime.GOARCH: mine, other: theirs}))
	d, err := mine.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return reg.Host + "/" + repo + ":1", idxDg, d.String()
}

// pullAll pulls ref per times on each node at once and checks each pull
// resolved to want with this machine's image.
func pullAll(t *testing.T, nodes []*pull.Puller, ref, want string, per int) {
	t.Helper()
	var wg sync.WaitGroup
	n := per * len(nodes)
	errs := make([]error, n)
	got := make([]pull.Pulled, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = nodes[i%len(nodes)].Pull(context.Background(), ref) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, pl := range got {
		if pl.Digest != want {
			t.Fatalf("pull %d resolved to %s, want %s", i, pl.Digest, want)
		}
		if c := pl.Image.Config; c == nil || len(c.Env) != 1 || c.Env[0] != "MINE=1" {
			t.Fatalf("pull %d: config %+v, want this platform's (MINE=1)", i, c)
		}
	}
}

// manifestGets counts the registry's manifest GETs by the name asked for.
func manifestGets(reg *registrytest.Registry) map[string]int {
	out := map[string]int{}
	for _, g := range reg.Gets() {
		if g.Manifest {
			out[g.Name]++
		}
	}
	return out
}

// TestClusterFetchesEachManifestOnce: two nodes sharing a blob store and
// claims pull a multi-platform index by tag at once: each resolves the tag
// with a HEAD, and the index body and this platform's manifest are fetched
// by digest once for both; a pull pinned to the digest asks the registry
// nothing about the manifest.
func TestClusterFetchesEachManifestOnce(t *testing.T) {
	reg := registrytest.Start(t, "alice", "pw")
	ref, idxDg, imgDg := multiPlatform(t, reg, "cluster/manifest")
	nodes := sharedNodes(t, reg, 2, "alice", "pw")
	pullAll(t, nodes, ref, idxDg, 4)

	gets := manifestGets(reg)
	if gets[idxDg] != 1 || gets[imgDg] != 1 {
		t.Errorf("manifest GETs %v: want the index %s and the image %s once each for the cluster", gets, idxDg, imgDg)
	}
	if gets["1"] != 0 {
		t.Errorf("manifest GETs by tag: %d, want none (a HEAD resolves the tag)", gets["1"])
	}
	heads := 0
	for _, h := range reg.Heads() {
		if h.Name == "1" {
			heads++
		}
	}
	if heads < 1 || heads > len(nodes)*4 {
		t.Errorf("%d HEADs of the tag, want 1..%d", heads, len(nodes)*4)
	}

	// A new node pinned to the digest: no HEAD, no manifest GET.
	before, headsBefore := len(reg.Gets()), len(reg.Heads())
	late := pulltest.New(t, reg, "alice", "pw")
	late.Blobs, late.Spec, late.Claims = nodes[0].Blobs, nodes[0].Spec, nodes[0].Claims
	pinned := reg.Host + "/cluster/manifest@" + idxDg
	if _, err := late.Pull(context.Background(), pinned); err != nil {
		t.Fatal(err)
	}
	for _, g := range reg.Gets()[before:] {
		if g.Manifest {
			t.Errorf("pinned pull on a new node fetched manifest %s: the shared store has it", g.Name)
		}
	}
	if n := len(reg.Heads()) - headsBefore; n != 0 {
		t.Errorf("pinned pull sent %d HEADs, want none", n)
	}
}

// TestPullWhenRegistryRefusesHead: a registry that answers HEAD 405 is
// resolved with a GET of the tag; the pulls succeed and the platform's
// manifest is still fetched once for the cluster.
func TestPullWhenRegistryRefusesHead(t *testing.T) {
	reg := registrytest.Start(t, "alice", "pw")
	ref, idxDg, imgDg := multiPlatform(t, reg, "cluster/nohead")
	reg.RefuseHead(true)
	nodes := sharedNodes(t, reg, 2, "alice", "pw")
	pullAll(t, nodes, ref, idxDg, 2)
	if len(reg.Heads()) == 0 {
		t.Fatal("no HEAD was tried")
	}
	gets := manifestGets(reg)
	if gets["1"] < 1 {
		t.Errorf("manifest GETs %v: want the tag fetched after the refused HEAD", gets)
	}
	if gets[imgDg] != 1 {
		t.Errorf("manifest GETs %v: want the image %s once for the cluster", gets, imgDg)
	}
	// Without a shared store the node reads as it always did.
	solo := pulltest.New(t, reg, "alice", "pw")
	if pl, err := solo.Pull(context.Background(), ref); err != nil || pl.Digest != idxDg {
		t.Fatalf("pull without a shared store: %+v, %v", pl, err)
	}
}

// TestPrivatePullsStayBehindTheRegistry: nodes without credentials of their
// own for a registry, sharing a blob store. One pulls with a request's own
// credentials; a pull pinned to that digest without them is refused
// permission_denied on that node (which holds the image) and on the other
// (whose shared store holds the layers: the manifests were not put there),
// and succeeds with them.
func TestPrivatePullsStayBehindTheRegistry(t *testing.T) {
	reg := registrytest.Start(t, "alice", "pw")
	ref, idxDg, _ := multiPlatform(t, reg, "private/task")
	nodes := sharedNodes(t, reg, 2, "mallory", "guess") // the node's own credentials are refused
	ctx := context.Background()
	withCreds := registry.WithCredentials(ctx, reg.Host, registry.Credentials{Username: "alice", Password: "pw"})
	if _, err := nodes[0].Pull(ctx, ref); errdefs.CodeOf(err) != api.CodePermissionDenied {
		t.Fatalf("pull by tag without credentials: %v, want permission_denied", err)
	}
	if pl, err := nodes[0].Pull(withCreds, ref); err != nil || pl.Digest != idxDg {
		t.Fatalf("pull with the request's credentials: %+v %v", pl, err)
	}
	pinned := reg.Host + "/private/task@" + idxDg
	for i, p := range nodes {
		if _, err := p.Pull(ctx, pinned); errdefs.CodeOf(err) != api.CodePermissionDenied {
			t.Errorf("node %d: pinned pull without credentials: %v, want permission_denied", i, err)
		}
		if pl, err := p.Pull(withCreds, pinned); err != nil || pl.Digest != idxDg {
			t.Errorf("node %d: pinned pull with credentials: %+v %v", i, pl, err)
		}
	}
}
