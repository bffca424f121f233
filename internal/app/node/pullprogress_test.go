package node

import (
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TestCreateShowsPullProgress: while a create's image is fetched (its large
// layer stalled mid-blob), the node's /v1 shows the pull's bytes fetched; the
// create then succeeds and no pull is left in flight.
func TestCreateShowsPullProgress(t *testing.T) {
	d, reg := pullNode(t)
	srv := httptest.NewServer(d.Server.Handler())
	t.Cleanup(srv.Close)
	cl := client.New(srv.URL, "test", client.WithRetry(0))
	ctx := context.Background()

	body := make([]byte, 256<<10)
	rnd := rand.New(rand.NewPCG(5, 6))
	for i := range body {
		body[i] = byte(rnd.Uint32())
	}
	big := registrytest.Layer(t, regEntry{Name: "data/big", Body: string(body)})
	bigSize, _ := big.Size()
	ref := reg.Host + "/tasks/progress:1"
	want := reg.Push(t, "tasks/progress:1", registrytest.Image(t, v1.Config{}, busyboxLayer(t), big))

	const stallAt = 32 << 10
	reg.Stall(stallAt)
	t.Cleanup(reg.Resume) // on failure too: the registry's Close waits for its stalled requests
	made := make(chan error, 1)
	var sb api.Sandbox
	go func() {
		var err error
		sb, err = cl.Create(ctx, api.CreateSandboxRequest{Image: ref})
		made <- err
	}()
	stalled := make(chan api.PullProgress, 1)
	wctx, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()
	cl.WatchPull(wctx, ref, 10*time.Millisecond, func(pr api.PullProgress) {
		if len(pr.Layers) == 2 && pr.Layers[1].FetchedBytes == stallAt {
			stalled <- pr
			stop()
		}
	})
	var pr api.PullProgress
	select {
	case pr = <-stalled:
	default:
		t.Fatal("the create's pull never showed its stalled layer")
	}
	if pr.Digest != want || pr.Layers[1].TotalBytes != bigSize || pr.Layers[1].Phase != api.PullFetching {
		t.Fatalf("progress %+v, want digest %s, layer 2 fetching of %d bytes", pr, want, bigSize)
	}
	reg.Resume()
	if err := <-made; err != nil {
		t.Fatal(err)
	}
	if sb.ImageDigest != want {
		t.Fatalf("sandbox digest %s, want %s", sb.ImageDigest, want)
	}
	if out, code := sh(t, d, sb.ID, "wc -c < /data/big"); code != 0 || out != "262144" {
		t.Fatalf("the large file in the sandbox: %q (exit %d)", out, code)
	}
	if pulls, err := cl.Pulls(ctx); err != nil || len(pulls) != 0 {
		t.Fatalf("pulls in flight after the create: %+v %v", pulls, err)
	}
}
