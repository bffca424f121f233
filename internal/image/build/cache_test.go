package build_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/build"
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

// TestBuildCachePruneScratch (no sandboxes: stages FROM scratch): a step
// whose layer only the cache holds is what prune removes, with its blob; a
// step the image holds stays; a budget evicts least recently used first; on
// a shared blob store prune removes the entry and keeps the blob.
func TestBuildCachePruneScratch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
	step := func(b *build.Builder, file string) string {
		t.Helper()
		res, err := b.Build(ctx, build.Request{BuildImageRequest: api.BuildImageRequest{Name: "img"},
			DockerfileText: []byte("FROM scratch\nCOPY " + file + " /\n"), ContextDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return res.Steps[1].Layer
	}
	has := func(blobs blob.Store, d string) bool {
		_, err := blobs.Stat(ctx, d)
		return err == nil
	}

	b, blobs := scratchBuilder(t)
	b.CacheDir = t.TempDir()
	la := step(b, "a.txt")
	lb := step(b, "b.txt") // img is b now: a's layer is the cache's alone
	p, err := b.Prune(ctx)
	if err != nil || len(p.Entries) != 1 || p.Bytes == 0 {
		t.Fatalf("prune: %+v %v, want a's one entry", p, err)
	}
	if has(blobs, la) || !has(blobs, lb) {
		t.Fatalf("after prune: a's layer kept %v, b's (the image's) kept %v", has(blobs, la), has(blobs, lb))
	}

	// Budget: a, then c, rebuilt as the image in turn; then b; with room for
	// one cache-only layer, the older (a) goes and c stays.
	la, lc := step(b, "a.txt"), step(b, "c.txt")
	u, err := b.CacheUsage(ctx)
	if err != nil || len(u.Entries) != 3 {
		t.Fatalf("cache: %+v %v, want 3 entries", u, err)
	}
	b.CacheBudget = u.Bytes - 1 // a and b cache-only after the next build: room for one
	_ = step(b, "b.txt")
	if has(blobs, la) || !has(blobs, lc) {
		t.Fatalf("budget eviction: a (older) kept %v, c (newer) kept %v", has(blobs, la), has(blobs, lc))
	}

	// A shared blob store: the entry goes, the blob stays.
	s, sblobs := scratchBuilder(t)
	s.SharedBlobs = true
	la = step(s, "a.txt")
	_ = step(s, "b.txt")
	if p, err := s.Prune(ctx); err != nil || len(p.Entries) != 1 || p.Bytes != 0 || !has(sblobs, la) {
		t.Fatalf("prune on a shared store: %+v %v, blob kept %v", p, err, has(sblobs, la))
	}
}
