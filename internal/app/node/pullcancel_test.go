package node

import (
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// stallBytes is where stalledImage's registry stops sending its large layer.
const stallBytes = 32 << 10

// stalledImage pushes repo (REPO:TAG) to reg, busybox and a large
// incompressible layer (of seed), and makes reg stall each blob after
// stallBytes until the test ends; it returns the reference and the digest.
func stalledImage(t *testing.T, reg *registrytest.Registry, repo string, seed uint64) (string, string) {
	t.Helper()
	body := make([]byte, 256<<10)
	rnd := rand.New(rand.NewPCG(seed, seed+1))
	for i := range body {
		body[i] = byte(rnd.Uint32())
	}
	dg := reg.Push(t, repo, registrytest.Image(t, v1.Config{}, busyboxLayer(t), registrytest.Layer(t, regEntry{Name: "data/big", Body: string(body)})))
	reg.Stall(stallBytes)
	t.Cleanup(reg.Resume) // on failure too: the registry's Close waits for its stalled requests
	return reg.Host + "/" + repo, dg
}

// TestDeletePullingStopsTheFetch: a create with wait false whose image's
// large layer stalls mid-blob, deleted: no create waits for the image any
// more, so its fetch stops (no pull in flight, the partial layer removed,
// no image recorded) though the registry never ends the blob.
func TestDeletePullingStopsTheFetch(t *testing.T) {
	d, reg := pullNode(t)
	srv := httptest.NewServer(d.Server.Handler())
	t.Cleanup(srv.Close)
	cl := client.New(srv.URL, "test", client.WithRetry(0))
	ctx := context.Background()

	ref, _ := stalledImage(t, reg, "tasks/deleted:1", 13)
	noWait := false
	sb, err := cl.Create(ctx, api.CreateSandboxRequest{Image: ref, Wait: &noWait})
	if err != nil || sb.State != api.StatePulling {
		t.Fatalf("create %+v %v, want state pulling", sb, err)
	}
	testwait.For(t, 60*time.Second, "GET to show the stalled layer", func() bool {
		got, err := cl.Get(ctx, sb.ID)
		return err == nil && got.Pull != nil && len(got.Pull.Layers) == 2 && got.Pull.Layers[1].FetchedBytes == stallBytes
	})
	tmp := filepath.Join(d.puller.Dir, "tmp")
	if ents, _ := os.ReadDir(tmp); len(ents) == 0 {
		t.Fatal("no partial layer while fetching")
	}
	if err := cl.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the fetch to stop and its partial layer to go", func() bool {
		pulls, err := cl.Pulls(ctx)
		ents, _ := os.ReadDir(tmp)
		return err == nil && len(pulls) == 0 && len(ents) == 0
	})
	if d.puller.Has(ref) {
		t.Fatal("an image recorded from a stopped fetch")
	}
}
