package pull_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/pull/pulltest"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// sharedStore is a blob store several pullers (nodes) share, with the
// cluster's etcd.
type sharedStore struct {
	reg   *registrytest.Registry
	cli   *clientv3.Client
	blobs blob.Store
	spec  string
	// prefix is the cluster's etcd prefix (environments, claims, holds).
	prefix string
}

func newSharedStore(t *testing.T) *sharedStore {
	_, cli := apptest.Etcd(t)
	spec := "dir:" + filepath.Join(t.TempDir(), "shared-blobs")
	blobs, err := blob.Open(spec, true)
	if err != nil {
		t.Fatal(err)
	}
	return &sharedStore{reg: registrytest.Start(t, "alice", "pw"), cli: cli, blobs: blobs, spec: spec, prefix: "/gc/"}
}

// gcGrace is the tests' grace: a blob released this long ago may go.
const gcGrace = 300 * time.Millisecond

// node is a puller of its own records on the shared store, claiming layers
// and publishing its holds in etcd, as `dsec agent --blob-store` makes one.
func (s *sharedStore) node(t *testing.T, name string, budget int64) (*pull.Puller, *pull.StoreGC) {
	p := pulltest.New(t, s.reg, "alice", "pw")
	p.Blobs, p.Spec, p.SharedBlobs = s.blobs, s.spec, true
	pfx := pull.ClaimsPrefix(s.prefix, s.spec)
	p.Claims = &pull.EtcdClaims{Client: s.cli, Prefix: pfx, Node: name}
	p.GC = &pull.StoreGC{Client: s.cli, Prefix: pfx, EnvPrefix: s.prefix, Node: name, Blobs: s.blobs, Budget: budget, Grace: gcGrace}
	return p, p.GC
}

// push pushes an image of one layer of n incompressible bytes and returns
// its reference, its layer's and config's digests.
func (s *sharedStore) push(t *testing.T, repo string, n int) (ref string, layer, config string) {
	l := registrytest.Layer(t, E{Name: repo + "/f", Body: randomBody(n)})
	img := registrytest.Image(t, v1.Config{Env: []string{"IMG=" + repo}}, l)
	s.reg.Push(t, repo+":1", img)
	dg, _ := l.Digest()
	cn, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return s.reg.Host + "/" + repo + ":1", dg.String(), cn.String()
}

// stored reports which of ds are in the store.
func (s *sharedStore) stored(t *testing.T, ds ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, d := range ds {
		_, err := s.blobs.Stat(context.Background(), d)
		out[d] = err == nil
	}
	return out
}

func (s *sharedStore) size(t *testing.T) int64 {
	t.Helper()
	ds, err := s.blobs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, d := range ds {
		sz, err := s.blobs.Stat(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		n += sz
	}
	return n
}

// blobsOfPulled is every blob an image pulled through a shared store has
// there: its layers' EROFS blobs and chunk indexes, and its config.
func blobsOfPulled(pl pull.Pulled, config string) []string {
	out := []string{config}
	for _, l := range pl.Image.Layers {
		out = append(out, l.Digest)
		if l.Index != "" {
			out = append(out, l.Index)
		}
	}
	return out
}

// inUse is the blob set a node's sandboxes on pl would report.
func inUse(pls ...pull.Pulled) map[string]bool {
	out := map[string]bool{}
	for _, pl := range pls {
		for _, l := range pl.Image.Layers {
			out[l.Digest] = true
			if l.Index != "" {
				out[l.Index] = true
			}
		}
	}
	return out
}

// readsFile checks that pl's top layer, read from the store, has file name.
func readsFile(t *testing.T, s *sharedStore, pl pull.Pulled, name string) {
	t.Helper()
	fsys := open(t, s.blobs, pl.Image.Layers[len(pl.Image.Layers)-1].Digest)
	if _, err := fs.ReadFile(fsys, name); err != nil {
		t.Fatalf("image %s: %s: %v", pl.Ref, name, err)
	}
}

// nextMilli waits until the clock shows a later millisecond (use times are
// kept in milliseconds).
func nextMilli(t *testing.T) {
	now := time.Now().UnixMilli()
	testwait.For(t, time.Second, "the next millisecond", func() bool { return time.Now().UnixMilli() > now+1 })
}

// evictUntil runs sync (the nodes' Sync of their holds, as their Run
// does) and Evict until cond holds (the grace of recent uses must pass
// first).
func evictUntil(t *testing.T, gc *pull.StoreGC, sync func(), what string, cond func(pull.Evicted) bool) pull.Evicted {
	t.Helper()
	var last pull.Evicted
	testwait.For(t, 20*time.Second, what, func() bool {
		sync()
		ev, err := gc.Evict(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.Blobs) > 0 || last.Before == 0 {
			last = ev
		}
		return cond(ev)
	})
	return last
}

// TestSharedStoreBudgetEvictsLeastRecentlyUsed: a shared blob store under a
// byte budget; three images pulled from a real registry, one of them run by
// a sandbox. Over the budget, eviction deletes the least recently used image
// no sandbox runs (not the older one in use); a pull of it fetches it from
// the registry again and it reads back. With the budget below everything,
// what a sandbox runs and what a stored environment names stay.
func TestSharedStoreBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	s := newSharedStore(t)
	ctx := context.Background()
	p, gc := s.node(t, "n1", 0)
	const size = 256 << 10
	refA, layA, cfgA := s.push(t, "gc/a", size)
	refB, layB, cfgB := s.push(t, "gc/b", size)
	refC, layC, cfgC := s.push(t, "gc/c", size)
	get := func(ref string) pull.Pulled {
		t.Helper()
		pl, err := p.Pull(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		nextMilli(t)
		return pl
	}
	a, b, c := get(refA), get(refB), get(refC)
	blobsB, blobsC := blobsOfPulled(b, cfgB), blobsOfPulled(c, cfgC)
	// A sandbox runs image a (the oldest): its layers are held, not its
	// config (only a pull reads it).
	sync := func() {
		if err := gc.Sync(ctx, inUse(a)); err != nil {
			t.Fatal(err)
		}
	}
	// A layer a stored environment names (e.g. `dsec image build`), no node holds.
	envBlob := blob.FromBytes([]byte("a built layer"))
	if err := s.blobs.Put(ctx, envBlob, strings.NewReader("a built layer"), -1); err != nil {
		t.Fatal(err)
	}
	m := image.Manifest{Version: image.ManifestVersion, Layers: []image.Layer{{Role: image.RoleBase, Digest: envBlob}}}
	mb, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctx, s.prefix+"env/built", string(mb)); err != nil {
		t.Fatal(err)
	}
	var sizeB int64
	for _, d := range append(blobsB, cfgA) {
		n, err := s.blobs.Stat(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		sizeB += n
	}
	total := s.size(t)
	gc.Budget = total - sizeB // room for all but image b and a's config
	ev := evictUntil(t, gc, sync, "an eviction", func(ev pull.Evicted) bool { return len(ev.Blobs) > 0 })
	t.Logf("store %d bytes, budget %d: evicted %d blobs, %d bytes left", ev.Before, gc.Budget, len(ev.Blobs), ev.After)
	for d, ok := range s.stored(t, blobsB...) {
		if ok {
			t.Errorf("blob %s of image b (least recently used, no sandbox) still stored", d)
		}
	}
	if s.stored(t, cfgA)[cfgA] {
		t.Errorf("image a's config %s (used least recently, no sandbox reads it) still stored", cfgA)
	}
	for d, ok := range s.stored(t, append(append(inUseList(a), blobsC...), envBlob)...) {
		if !ok {
			t.Errorf("blob %s evicted: only image b's and a's config had to go (a's layers are in use, c more recent)", d)
		}
	}
	if ev.After > gc.Budget {
		t.Errorf("store %d bytes after eviction, budget %d", ev.After, gc.Budget)
	}
	if r, err := s.cli.Get(ctx, pull.ClaimsPrefix(s.prefix, s.spec)+"gc/deleting"); err != nil || len(r.Kvs) != 0 {
		t.Errorf("eviction's tombstone left: %v %v", r, err)
	}

	// A create of b after its eviction fetches it from the registry again.
	b2 := get(refB)
	if n := s.reg.BlobGets()[layB]; n != 2 {
		t.Errorf("image b's layer fetched %d times, want 2 (once more after its eviction)", n)
	}
	readsFile(t, s, b2, "gc/b/f")
	for d, ok := range s.stored(t, blobsOfPulled(b2, cfgB)...) {
		if !ok {
			t.Errorf("blob %s of image b missing after its pull", d)
		}
	}
	// c is still stored: a pull asks the registry for its tag only.
	get(refC)
	if n := s.reg.BlobGets()[layC]; n != 1 {
		t.Errorf("image c's layer fetched %d times, want once", n)
	}

	// A budget below everything: all goes but what the sandbox runs and
	// what the environment names.
	gc.Budget = 1
	evictUntil(t, gc, sync, "b's and c's layers evicted", func(pull.Evicted) bool {
		st := s.stored(t, layB, layC)
		return !st[layB] && !st[layC]
	})
	for d, ok := range s.stored(t, append(inUseList(a), envBlob)...) {
		if !ok {
			t.Errorf("blob %s evicted: a sandbox runs it or an environment names it", d)
		}
	}
	if n := s.reg.BlobGets()[layA]; n != 1 {
		t.Errorf("image a's layer fetched %d times, want once", n)
	}
	readsFile(t, s, get(refA), "gc/a/f")
	readsFile(t, s, get(refC), "gc/c/f")
}

func inUseList(pl pull.Pulled) []string {
	var out []string
	for d := range inUse(pl) {
		out = append(out, d)
	}
	return out
}

// TestSharedStoreEvictionSparesOtherNodesHolds: two nodes share the blob
// store and etcd. Node a runs a sandbox on image x; node b pulled image y
// later. b's eviction under a tiny budget deletes y's blobs, never x's,
// though x was used longer ago. Once a's sandbox is gone, x goes too, and
// a's next create of x (its records now naming missing blobs) fetches it
// again.
func TestSharedStoreEvictionSparesOtherNodesHolds(t *testing.T) {
	s := newSharedStore(t)
	ctx := context.Background()
	pa, gca := s.node(t, "a", 0)
	pb, gcb := s.node(t, "b", 1)
	refX, layX, _ := s.push(t, "two/x", 128<<10)
	refY, _, cfgY := s.push(t, "two/y", 128<<10)
	x, err := pa.Pull(ctx, refX)
	if err != nil {
		t.Fatal(err)
	}
	aUse := inUse(x) // a's sandbox on x
	sync := func() {
		if err := gca.Sync(ctx, aUse); err != nil {
			t.Fatal(err)
		}
		if err := gcb.Sync(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	nextMilli(t)
	y, err := pb.Pull(ctx, refY)
	if err != nil {
		t.Fatal(err)
	}
	evictUntil(t, gcb, sync, "y's blobs evicted by b", func(pull.Evicted) bool {
		for _, ok := range s.stored(t, blobsOfPulled(y, cfgY)...) {
			if ok {
				return false
			}
		}
		return true
	})
	for d, ok := range s.stored(t, inUseList(x)...) {
		if !ok {
			t.Fatalf("blob %s of image x evicted by node b while node a's sandbox runs it", d)
		}
	}
	readsFile(t, s, x, "two/x/f")
	// b pulls x: in the store, nothing fetched.
	if _, err := pb.Pull(ctx, refX); err != nil {
		t.Fatal(err)
	}
	if n := s.reg.BlobGets()[layX]; n != 1 {
		t.Errorf("x's layer fetched %d times, want once", n)
	}

	// a's sandbox ends: x may go once its grace (and b's pull's) passed.
	aUse = nil
	erofsX := x.Image.Layers[0].Digest
	evictUntil(t, gcb, sync, "x's layer evicted", func(pull.Evicted) bool { return !s.stored(t, erofsX)[erofsX] })
	x2, err := pa.Pull(ctx, refX)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.reg.BlobGets()[layX]; n != 2 {
		t.Errorf("x's layer fetched %d times, want twice (again after its eviction)", n)
	}
	readsFile(t, s, x2, "two/x/f")
	if x2.Image.Layers[0].Digest != x.Image.Layers[0].Digest {
		t.Errorf("x converted to %s after its eviction, %s before", x2.Image.Layers[0].Digest, x.Image.Layers[0].Digest)
	}
	// Holds are as published: a's record names x again.
	r, err := s.cli.Get(ctx, pull.ClaimsPrefix(s.prefix, s.spec)+"gc/hold/a")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("node a's holds: %v %v", r, err)
	}
	var h struct{ Held []string }
	if err := json.Unmarshal(r.Kvs[0].Value, &h); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range h.Held {
		found = found || d == erofsX
	}
	if !found {
		t.Errorf("node a's holds %v do not name x's layer %s after its pull", h.Held, erofsX)
	}
}
