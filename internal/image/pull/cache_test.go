package pull_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// randomBody is n incompressible bytes (hex of random bytes is compressible
// by half at most: good enough to keep a gzip layer near n/2).
func randomBody(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// blobsOf lists the blob store's digests.
func blobsOf(t *testing.T, e *env) map[string]bool {
	t.Helper()
	ds, err := e.blobs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range ds {
		out[d] = true
	}
	return out
}

// consistent checks what a user of the cache relies on: every image record's
// layers and every layer record's blobs are in the store, every reference
// names an image record, no temporary file is left.
func consistent(t *testing.T, e *env) {
	t.Helper()
	has := blobsOf(t, e)
	imgs, err := e.p.Cached()
	if err != nil {
		t.Fatal(err)
	}
	byDigest := map[string]bool{}
	for _, c := range imgs {
		byDigest[c.Digest] = true
		for _, l := range c.Manifest.Layers {
			if !has[l.Digest] || l.Index != "" && !has[l.Index] {
				t.Errorf("image %s names layer %s whose blob is missing", c.Digest, l.Digest)
			}
		}
	}
	recs, _ := filepath.Glob(filepath.Join(e.p.Dir, "layers", "*.json"))
	for _, r := range recs {
		b, err := os.ReadFile(r)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"digest":"sha256:`) {
			t.Errorf("layer record %s: %s", r, b)
		}
		for _, f := range strings.Split(string(b), `"`) {
			if strings.HasPrefix(f, "sha256:") && !has[f] {
				t.Errorf("layer record %s names blob %s, missing", filepath.Base(r), f)
			}
		}
	}
	refs, err := e.p.Refs()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if !byDigest[r.Digest] {
			t.Errorf("reference %s names %s, which has no image record", r.Ref, r.Digest)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.p.Dir, "tmp")); len(ents) != 0 {
		t.Errorf("temporary files left: %v", ents)
	}
	tmps, _ := filepath.Glob(filepath.Join(e.p.Dir, "*", ".tmp-*"))
	btmps, _ := filepath.Glob(filepath.Join(filepath.Dir(e.p.Dir), "blobs", "sha256", ".tmp-*"))
	if len(tmps)+len(btmps) != 0 {
		t.Errorf("temporary files left: %v %v", tmps, btmps)
	}
}

func TestRemoveKeepsSharedLayersAndRefusesInUse(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	shared := registrytest.Layer(t, E{Name: "base/f", Body: "shared"})
	a := e.reg.Push(t, "rm/a:1", registrytest.Image(t, v1.Config{}, shared, registrytest.Layer(t, E{Name: "a", Body: "a"})))
	e.reg.Push(t, "rm/b:1", registrytest.Image(t, v1.Config{}, shared, registrytest.Layer(t, E{Name: "b", Body: "b"})))
	pa, err := e.p.Pull(ctx, e.reg.Host+"/rm/a:1")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := e.p.Pull(ctx, e.reg.Host+"/rm/b:1")
	if err != nil {
		t.Fatal(err)
	}
	if pa.Image.Layers[0].Digest != pb.Image.Layers[0].Digest {
		t.Fatal("the shared layer converted to two blobs")
	}

	// In use: refused with the sandbox named, nothing removed.
	e.p.InUse = func(context.Context) (map[string][]string, error) {
		return map[string][]string{a: {"sb-2", "sb-1"}}, nil
	}
	_, err = e.p.Remove(ctx, e.reg.Host+"/rm/a:1")
	if errdefs.CodeOf(err) != api.CodeConflict || !strings.Contains(err.Error(), "sb-1, sb-2") || !strings.Contains(err.Error(), "rm/a:1") {
		t.Fatalf("removing an image in use: %v, want conflict naming the image and sb-1, sb-2", err)
	}
	if !blobsOf(t, e)[pa.Image.Layers[1].Digest] {
		t.Fatal("a refused removal deleted a blob")
	}
	e.p.InUse = nil

	// By tag: A's own layer goes, the shared one stays for B.
	r, err := e.p.Remove(ctx, e.reg.Host+"/rm/a:1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Digest != a || len(r.Refs) != 1 || r.Bytes != pa.Image.Layers[1].Size {
		t.Fatalf("removed %+v, want %s with its own layer's %d bytes", r, a, pa.Image.Layers[1].Size)
	}
	has := blobsOf(t, e)
	if has[pa.Image.Layers[1].Digest] || !has[pb.Image.Layers[0].Digest] || !has[pb.Image.Layers[1].Digest] {
		t.Fatalf("after removing a: blobs %v", has)
	}
	consistent(t, e)
	if _, err := e.p.Remove(ctx, e.reg.Host+"/rm/a:1"); errdefs.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("removing it again: %v, want not_found", err)
	}
	if _, err := e.p.Remove(ctx, "not a ref!"); errdefs.CodeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("a malformed name: %v, want invalid_argument", err)
	}
	// B still resolves with no layer fetched again; by digest, everything goes.
	before := e.reg.BlobGets()
	if _, err := e.p.Pull(ctx, e.reg.Host+"/rm/b:1"); err != nil {
		t.Fatal(err)
	}
	for d, n := range e.reg.BlobGets() {
		if n != before[d] && d != pb.Digest {
			t.Errorf("blob %s fetched again", d)
		}
	}
	if _, err := e.p.Remove(ctx, pb.Digest); err != nil {
		t.Fatal(err)
	}
	if has := blobsOf(t, e); len(has) != 0 {
		t.Fatalf("blobs left after removing every image: %v", has)
	}
	if refs, _ := e.p.Refs(); len(refs) != 0 {
		t.Fatalf("refs left: %+v", refs)
	}
	// A removed image pulls again.
	if _, err := e.p.Pull(ctx, e.reg.Host+"/rm/a:1"); err != nil {
		t.Fatalf("pull after removal: %v", err)
	}
	consistent(t, e)
}

func TestBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	base := registrytest.Layer(t, E{Name: "base/f", Body: randomBody(64 << 10)})
	top := map[string]string{} // image → the OCI digest of its own layer
	push := func(n string) {
		l := registrytest.Layer(t, E{Name: n, Body: randomBody(64 << 10)})
		dg, _ := l.Digest()
		top[n] = dg.String()
		e.reg.Push(t, "lru/"+n+":1", registrytest.Image(t, v1.Config{}, base, l))
	}
	pullRef := func(n string) pull.Pulled {
		t.Helper()
		p, err := e.p.Pull(ctx, e.reg.Host+"/lru/"+n+":1")
		if err != nil {
			t.Fatalf("pull %s: %v", n, err)
		}
		return p
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		push(n)
	}
	pa, pb := pullRef("a"), pullRef("b")
	two, err := e.p.CacheBytes()
	if err != nil {
		t.Fatal(err)
	}
	// Room for the base and two images' own layers.
	e.p.Budget = two
	pullRef("a") // a is now used more recently than b
	pc := pullRef("c")
	imgs, _ := e.p.Cached()
	got := map[string]bool{}
	for _, c := range imgs {
		got[c.Digest] = true
	}
	if !got[pa.Digest] || got[pb.Digest] || !got[pc.Digest] {
		t.Fatalf("after c: cache %v; want a and c (b least recently used)", imgs)
	}
	if n, _ := e.p.CacheBytes(); n > e.p.Budget {
		t.Fatalf("cache %d bytes over its budget %d", n, e.p.Budget)
	}
	has := blobsOf(t, e)
	if !has[pa.Image.Layers[0].Digest] || has[pb.Image.Layers[1].Digest] {
		t.Fatal("eviction of b removed the shared base or kept b's own layer")
	}
	consistent(t, e)

	// An image in use is never evicted, however old: a is in use, c goes.
	e.p.InUse = func(context.Context) (map[string][]string, error) {
		return map[string][]string{pa.Digest: {"sb-a"}}, nil
	}
	pullRef("c")
	pd := pullRef("d")
	imgs, _ = e.p.Cached()
	got = map[string]bool{}
	for _, c := range imgs {
		got[c.Digest] = true
	}
	if !got[pa.Digest] || got[pc.Digest] || !got[pd.Digest] {
		t.Fatalf("after d with a in use: cache %v; want a and d", imgs)
	}
	// A create of an evicted image simply pulls it again.
	gets := e.reg.BlobGets()[top["b"]]
	pullRef("b")
	if after := e.reg.BlobGets()[top["b"]]; after != gets+1 {
		t.Fatalf("b's own layer fetched %d → %d times: want once more", gets, after)
	}
	consistent(t, e)

	// An image whose layers alone exceed the budget is refused up front.
	e.p.Budget = 1000
	push("big")
	_, err = e.p.Pull(ctx, e.reg.Host+"/lru/big:1")
	if errdefs.CodeOf(err) != api.CodeResourceExhausted || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("an image over the budget: %v, want resource_exhausted", err)
	}
}

// With a blob store other nodes read (SharedBlobs), removing an image drops
// this node's records only: every blob stays in the store for the nodes that
// may run on it, nothing is counted as freed, and a later pull of the image
// is this node's again.
func TestRemoveWithSharedBlobsKeepsBlobs(t *testing.T) {
	e := newEnv(t, nil)
	e.p.SharedBlobs = true
	ctx := context.Background()
	ref := e.reg.Host + "/shared/a:1"
	e.reg.Push(t, "shared/a:1", registrytest.Image(t, v1.Config{}, registrytest.Layer(t, E{Name: "a", Body: randomBody(8 << 10)})))
	pa, err := e.p.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	before := blobsOf(t, e)
	r, err := e.p.Remove(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 0 || len(r.Refs) != 1 {
		t.Fatalf("removed %+v, want its reference and no bytes freed", r)
	}
	after := blobsOf(t, e)
	for d := range before {
		if !after[d] {
			t.Errorf("blob %s deleted from the shared store", d)
		}
	}
	if imgs, err := e.p.Cached(); err != nil || len(imgs) != 0 {
		t.Fatalf("images cached after the removal: %v %v", imgs, err)
	}
	if err := e.p.Clean(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(blobsOf(t, e)); n != len(before) {
		t.Errorf("Clean left %d blobs of %d", n, len(before))
	}
	again, err := e.p.Pull(ctx, ref)
	if err != nil || again.Image.Layers[0].Digest != pa.Image.Layers[0].Digest {
		t.Fatalf("pull again: %+v %v", again, err)
	}
	consistent(t, e)
}
