package pull_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// stalledImage pushes an image whose second layer is larger than the stall
// point and makes the registry stall each blob there; it returns the
// reference.
func stalledImage(t *testing.T, e *env, repo string) string {
	t.Helper()
	rnd := rand.New(rand.NewPCG(3, 4))
	big := make([]byte, 512<<10) // incompressible
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	e.reg.Push(t, repo+":1", registrytest.Image(t, v1.Config{},
		registrytest.Layer(t, E{Name: "small", Body: "s"}), registrytest.Layer(t, E{Name: "large", Body: string(big)})))
	e.reg.Stall(64 << 10)
	t.Cleanup(e.reg.Resume) // the registry's Close waits for its stalled requests
	return e.reg.Host + "/" + repo + ":1"
}

func stalledAt(e *env, ref string) func() bool {
	return func() bool {
		pr, ok := e.p.Progress(ref)
		return ok && len(pr.Layers) == 2 && pr.Layers[1].FetchedBytes == 64<<10 && pr.Layers[0].Phase == api.PullDone
	}
}

// A pull whose only caller goes away stops: the registry connection is
// closed (the stalled blob would otherwise hang it forever), the partial
// layer is removed, nothing is recorded; a later pull fetches it again.
func TestPullStopsWhenNoCallerWaits(t *testing.T) {
	e := newEnv(t, nil)
	ref := stalledImage(t, e, "cancel/app")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.p.Pull(ctx, ref)
		errc <- err
	}()
	waitFor(t, "the small layer done, the large one stalled mid-blob", stalledAt(e, ref))
	tmp := filepath.Join(e.p.Dir, "tmp")
	if ents, _ := os.ReadDir(tmp); len(ents) == 0 {
		t.Fatal("no partial layer in the temp dir while fetching")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("pull of a caller gone: %v, want context.Canceled", err)
	}
	waitFor(t, "the fetch stopped and its partial layer removed", func() bool {
		ents, _ := os.ReadDir(tmp)
		return len(ents) == 0 && len(e.p.Pulls()) == 0
	})
	if e.p.Has(ref) {
		t.Fatal("an image recorded from a stopped fetch")
	}
	if imgs, _ := e.p.Cached(); len(imgs) != 0 {
		t.Fatalf("images recorded from a stopped fetch: %v", imgs)
	}

	e.reg.Resume()
	if _, err := e.p.Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if n := e.p.LayersFetched.Load(); n != 3 {
		t.Fatalf("%d layer fetches, want 3 (two, then the stopped one again)", n)
	}
}

// A pull goes on while one caller still waits for it: the other's going
// away does not stop it.
func TestPullGoesOnForTheCallersLeft(t *testing.T) {
	e := newEnv(t, nil)
	ref := stalledImage(t, e, "cancel/shared")
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() {
		_, err := e.p.Pull(ctx, ref)
		errs <- err
	}()
	go func() {
		_, err := e.p.Pull(context.Background(), ref)
		errs <- err
	}()
	waitFor(t, "the small layer done, the large one stalled mid-blob", stalledAt(e, ref))
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("pull of the caller gone: %v, want context.Canceled", err)
	}
	if _, ok := e.p.Progress(ref); !ok {
		t.Fatal("the pull stopped though a caller still waits for it")
	}
	e.reg.Resume()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if n := e.p.LayersFetched.Load(); n != 2 {
		t.Fatalf("%d layer fetches, want 2", n)
	}
}
