package pull_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 20*time.Second, what, cond)
}

// A pull stalled mid-blob shows each layer's bytes fetched of its size, the
// same to every caller sharing it and by reference or digest; once it ends
// no progress is left.
func TestProgressOfStalledPull(t *testing.T) {
	e := newEnv(t, nil)
	rnd := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 512<<10) // incompressible: its blob is larger than the stall point
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	small := registrytest.Layer(t, E{Name: "small", Body: "s"})
	large := registrytest.Layer(t, E{Name: "large", Body: string(big)})
	want := e.reg.Push(t, "progress/app:1", registrytest.Image(t, v1.Config{}, small, large))
	smallSize, _ := small.Size()
	largeSize, _ := large.Size()
	smallDg, _ := small.Digest()
	largeDg, _ := large.Digest()
	const stallAt = 64 << 10
	if smallSize >= stallAt || largeSize <= stallAt {
		t.Fatalf("layer sizes %d and %d do not straddle the stall point", smallSize, largeSize)
	}
	ref := e.reg.Host + "/progress/app:1"
	if _, ok := e.p.Progress(ref); ok {
		t.Fatal("progress before any pull")
	}

	e.reg.Stall(stallAt)
	t.Cleanup(e.reg.Resume) // on failure too: the registry's Close waits for its stalled requests
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := e.p.Pull(context.Background(), ref)
			errs <- err
		}()
	}
	var got api.PullProgress
	waitFor(t, "the large layer stalled and the small one done", func() bool {
		pr, ok := e.p.Progress(ref)
		got = pr
		return ok && len(pr.Layers) == 2 && pr.Layers[1].FetchedBytes == stallAt && pr.Layers[0].Phase == api.PullDone
	})
	if got.Ref != ref || got.Digest != want || got.Phase != api.PullFetching || got.TotalBytes != smallSize+largeSize ||
		got.FetchedBytes != smallSize+stallAt {
		t.Fatalf("progress %+v, want ref %s digest %s fetching %d of %d bytes", got, ref, want, smallSize+stallAt, smallSize+largeSize)
	}
	if l := got.Layers[1]; l.Digest != largeDg.String() || l.Phase != api.PullFetching || l.TotalBytes != largeSize {
		t.Fatalf("large layer %+v", l)
	}
	if l := got.Layers[0]; l.Digest != smallDg.String() || l.FetchedBytes != smallSize {
		t.Fatalf("small layer %+v", l)
	}
	byDigest, ok := e.p.Progress(want)
	if !ok || byDigest.FetchedBytes != got.FetchedBytes || byDigest.Digest != want {
		t.Fatalf("by digest: %+v %v", byDigest, ok)
	}
	if all := e.p.Pulls(); len(all) != 1 || all[0].Ref != ref {
		t.Fatalf("pulls in flight %+v", all)
	}

	e.reg.Resume()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if pr, ok := e.p.Progress(ref); ok {
		t.Fatalf("progress after the pull ended: %+v", pr)
	}
	if n := e.p.LayersFetched.Load(); n != 2 {
		t.Fatalf("%d layers fetched by two callers of one pull, want 2", n)
	}
}
