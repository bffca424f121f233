package router

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	v1reg "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/backend/driver/mock"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// blobMounter plays layerd for the mock driver: a layer mounts only if its
// EROFS blob is in the node's blob store; the base layer's directory holds
// the /etc/passwd the mock driver reads.
type blobMounter struct {
	blobs blob.Store
	root  string
}

func (b blobMounter) Acquire(ctx context.Context, _ string, layers []image.Layer) ([]string, error) {
	out := make([]string, len(layers))
	for i, l := range layers {
		if _, err := b.blobs.Stat(ctx, l.Digest); err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		out[i] = b.root
	}
	return out, nil
}

func (blobMounter) Release(context.Context, string) error { return nil }
func (blobMounter) Sync(context.Context, []string) error  { return nil }

// TestCreatesFetchEachLayerOnceInCluster: 30 concurrent creates of a
// never-seen image through an API server, placed over three nodes that
// share one blob store and claim layers in a real etcd, all run, and each
// layer is fetched from the registry once for the whole cluster.
func TestCreatesFetchEachLayerOnceInCluster(t *testing.T) {
	_, cli := apptest.Etcd(t)
	reg := registrytest.Start(t, "alice", "pw")
	layers := []v1reg.Layer{randomLayer(t, 21, 64<<10), randomLayer(t, 23, 64<<10), randomLayer(t, 25, 64<<10)}
	ref := reg.Host + "/cluster/once:1"
	want := reg.Push(t, "cluster/once:1", registrytest.Image(t, v1reg.Config{}, layers...))

	spec := "dir:" + filepath.Join(t.TempDir(), "shared-blobs")
	blobs, err := blob.Open(spec, true)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pc := newPullClusterWith(t, reg, func(name string, p *pull.Puller, s *image.Store) {
		p.Blobs, p.Spec = blobs, spec
		p.Claims = &pull.EtcdClaims{Client: cli, Prefix: pull.ClaimsPrefix("/once/", spec), Node: name}
		s.Layers = blobMounter{blobs: blobs, root: root}
	}, "a", "b", "c")

	const n = 30
	sbs := make([]api.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sbs[i], errs[i] = pc.cl.Create(t.Context(), api.CreateSandboxRequest{Backend: mock.Name, Image: ref})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.State != api.StateRunning || sb.ImageDigest != want {
			t.Fatalf("sandbox %+v, want running on %s", sb, want)
		}
	}
	var fetched int64
	for _, p := range pc.pullers {
		fetched += p.LayersFetched.Load()
	}
	gets := reg.BlobGets()
	for i, l := range layers {
		dg, _ := l.Digest()
		if gets[dg.String()] != 1 {
			t.Errorf("layer %d fetched from the registry %d times, want once for the cluster", i, gets[dg.String()])
		}
	}
	pulledOn := 0
	for name, p := range pc.pullers {
		if p.Has(ref) {
			pulledOn++
		} else {
			t.Logf("node %s got no create", name)
		}
	}
	if pulledOn < 2 {
		t.Fatalf("the image is on %d nodes: the creates were not spread (placement), nothing shared", pulledOn)
	}
	t.Logf("%d creates over %d nodes: %d layer fetches from the registry for %d layers", n, pulledOn, fetched, len(layers))
}
