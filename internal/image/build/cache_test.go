package build_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// runStep returns the result of the build's RUN step (its one RUN).
func runStep(t *testing.T, res api.BuildImageResult) api.BuildStep {
	t.Helper()
	for _, s := range res.Steps {
		if len(s.Instruction) >= 3 && s.Instruction[:3] == "RUN" {
			return s
		}
	}
	t.Fatalf("no RUN step in %+v", res.Steps)
	return api.BuildStep{}
}

func blobExists(t *testing.T, d *node.Daemon, digest string) bool {
	t.Helper()
	_, err := d.Builder.Envs.Blobs.Stat(context.Background(), digest)
	if err != nil && !errdefs.Is(err, api.CodeNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestBuildCacheBudget: with a budget smaller than any layer, a step whose
// layer only the cache holds (its image was rebuilt from another
// Dockerfile) is evicted after the next build, its blob deleted, and a
// rebuild redoes it; a step whose layer a sandbox runs on survives the same
// eviction and a rebuild hits it; `dsec image prune` (POST
// /v1/images:prune) empties the cache once no sandbox uses it.
func TestBuildCacheBudget(t *testing.T) {
	d := startNode(t)
	ctx := context.Background()
	d.Builder.CacheBudget = 1
	dir := t.TempDir()
	const one = "FROM debian\nRUN head -c 300000 /dev/urandom > /one && echo one > /one.txt\n"
	const two = "FROM debian\nRUN echo two > /two.txt\n"

	first, err := buildIn(t, d, "x", dir, one, nil)
	if err != nil {
		t.Fatal(err)
	}
	layerOne := runStep(t, first).Layer
	// Image x holds the layer: the cache holds nothing of its own, evicts
	// nothing, and a rebuild hits.
	again, err := buildIn(t, d, "x", dir, one, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !runStep(t, again).Cached {
		t.Fatalf("rebuild of an unchanged Dockerfile redid the RUN: %+v", again.Steps)
	}
	// x rebuilt from another Dockerfile: layer one is the cache's alone and
	// over the budget.
	if _, err := buildIn(t, d, "x", dir, two, nil); err != nil {
		t.Fatal(err)
	}
	if blobExists(t, d, layerOne) {
		t.Fatalf("layer %s of the evicted step is still in the blob store", layerOne)
	}
	if u, err := d.Builder.CacheUsage(ctx); err != nil || u.Bytes > 1 {
		t.Fatalf("cache after eviction: %d bytes, over the budget (%v)", u.Bytes, err)
	}
	redo, err := buildIn(t, d, "x", dir, one, nil)
	if err != nil {
		t.Fatal(err)
	}
	if runStep(t, redo).Cached {
		t.Fatalf("the evicted step was a cache hit: %+v", redo.Steps)
	}
	layerOne = runStep(t, redo).Layer

	// A sandbox of x runs on layer one: a rebuild of x from two leaves the
	// layer the cache's alone, and eviction keeps it.
	sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Backend: "container", Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := buildIn(t, d, "x", dir, two, nil); err != nil {
		t.Fatal(err)
	}
	if !blobExists(t, d, layerOne) {
		t.Fatalf("layer %s a sandbox runs on was evicted", layerOne)
	}
	if got := exec(t, d, sb.ID, "cat /one.txt"); got != "one" {
		t.Fatalf("sandbox on the kept layer reads %q", got)
	}
	hit, err := buildIn(t, d, "x", dir, one, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !runStep(t, hit).Cached {
		t.Fatalf("the step a sandbox kept was not a cache hit: %+v", hit.Steps)
	}

	// Prune: while the sandbox runs, its step is kept; once it is gone
	// (and x is rebuilt from two), prune removes it.
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	cl := client.New(srv.URL, "test")
	if _, err := buildIn(t, d, "x", dir, two, nil); err != nil {
		t.Fatal(err)
	}
	res, err := cl.PruneImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.BuildCache == nil || res.BuildCache.Kept == 0 || !blobExists(t, d, layerOne) {
		t.Fatalf("prune with a sandbox on a cached step: %+v, layer kept %v", res.BuildCache, blobExists(t, d, layerOne))
	}
	if err := d.Manager.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if res, err = cl.PruneImages(ctx); err != nil {
		t.Fatal(err)
	}
	if res.BuildCache == nil || res.BuildCache.Entries == 0 || res.BuildCache.Bytes == 0 || blobExists(t, d, layerOne) {
		t.Fatalf("prune with no sandbox: %+v, layer kept %v", res.BuildCache, blobExists(t, d, layerOne))
	}
	// The image x (two) still works: its layer was never the cache's alone.
	sb2, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Backend: "container", Image: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Manager.Delete(ctx, sb2.ID)
	if got := exec(t, d, sb2.ID, "cat /two.txt"); got != "two" {
		t.Fatalf("image x after prune reads %q", got)
	}
}
