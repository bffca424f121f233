package envstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/pkg/api"
)

// states are the State implementations every test runs on: one suite, both
// stores.
var states = []string{"dir", "etcd"}

var prefixN atomic.Int64

// setupState returns a store of the named kind over a fresh blob directory:
// a temp dir, or a fresh key prefix of the package's embedded etcd.
func setupState(t testing.TB, kind string) (*envstore.Store, blob.Store) {
	bs, err := blob.NewDir(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	if kind == "etcd" {
		prefix := fmt.Sprintf("/envstore-test-%d-%d/", os.Getpid(), prefixN.Add(1))
		return envstore.New(envstore.NewEtcdState(testEtcd(t), prefix), bs), bs
	}
	s, err := envstore.Open(t.TempDir(), bs)
	if err != nil {
		t.Fatal(err)
	}
	return s, bs
}

func setup(t testing.TB) (*envstore.Store, blob.Store) { return setupState(t, "dir") }

// forEachState runs f on each State kind, as a subtest.
func forEachState(t *testing.T, f func(t *testing.T, s *envstore.Store, bs blob.Store)) {
	for _, k := range states {
		t.Run(k, func(t *testing.T) {
			s, bs := setupState(t, k)
			f(t, s, bs)
		})
	}
}

func buildLayer(t testing.TB, bs blob.Store, s *envstore.Store, name, content string) (layer.Result, time.Duration) {
	d := t.(interface{ TempDir() string }).TempDir()
	os.WriteFile(filepath.Join(d, "version"), []byte(content), 0o644)
	os.WriteFile(filepath.Join(d, "payload"), make([]byte, 4<<20), 0o644)
	start := time.Now()
	l, err := layer.Build(context.Background(), layer.Source{Kind: "dir", Arg: d}, bs, layer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if err := s.PutLayer(context.Background(), envstore.Named(name, l.Source, l.Layer)); err != nil {
		t.Fatal(err)
	}
	return l, el
}

func TestComposeGetRemove(t *testing.T) { forEachState(t, testComposeGetRemove) }

func testComposeGetRemove(t *testing.T, s *envstore.Store, bs blob.Store) {
	ctx := context.Background()
	base, _ := buildLayer(t, bs, s, "base", "v1")
	tk, _ := buildLayer(t, bs, s, "py-tools", "tk")
	e, err := s.Compose(ctx, "task-1", "base", []string{"py-tools"}, tk.Digest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "task-1")
	if err != nil || len(got.Layers) != 3 || got.Layers[0].Digest != base.Digest || got.Layers[0].Name != "base" || !got.HasWorkspace() {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if r := []string{e.Layers[0].Role, e.Layers[1].Role, e.Layers[2].Role}; r[0] != "base" || r[1] != "toolkit" || r[2] != "workspace" {
		t.Fatalf("roles %v, want base first", r)
	}
	if ls := e.Layers; ls[0].Digest != base.Digest || ls[1].Name != "py-tools" || ls[2].Digest != tk.Digest {
		t.Fatalf("layers order %+v", ls)
	}
	if _, err := s.Compose(ctx, "task-2", "", nil, ""); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("no base: %v", err)
	}
	if _, err := s.Compose(ctx, "task-2", "nope", nil, ""); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("missing layer: %v", err)
	}
	if _, err := s.Compose(ctx, "task-2", "sha256:"+fmt.Sprintf("%064x", 1), nil, ""); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("missing blob: %v", err)
	}
	if _, err := s.Compose(ctx, "Bad/Name", "base", nil, ""); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("bad name: %v", err)
	}
	if err := s.Remove(ctx, "base"); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("remove used layer: %v", err)
	}
	s.InUse = func(n string) bool { return n == "task-1" }
	if err := s.Remove(ctx, "task-1"); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("remove in-use env: %v", err)
	}
	s.InUse = nil
	if err := s.Remove(ctx, "task-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "base"); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
	if l, _ := s.List(ctx); len(l) != 0 {
		t.Fatalf("list = %v", l)
	}
}

// TestRebaseScaling: updating the base of N environments = one layer build (cost
// independent of N) + N small manifest rewrites.
func TestRebaseScaling(t *testing.T) {
	forEachState(t, func(t *testing.T, _ *envstore.Store, _ blob.Store) { testRebaseScaling(t) })
}

func testRebaseScaling(t *testing.T) {
	kind := t.Name()[strings.LastIndex(t.Name(), "/")+1:]
	for _, n := range []int{10, 100, 1000} {
		s, bs := setupState(t, kind)
		ctx := context.Background()
		old, _ := buildLayer(t, bs, s, "base", "v1")
		tk, _ := buildLayer(t, bs, s, "tools", "t")
		for i := 0; i < n; i++ {
			if _, err := s.Compose(ctx, fmt.Sprintf("env-%d", i), "base", []string{"tools"}, ""); err != nil {
				t.Fatal(err)
			}
		}
		blobsBefore, _ := bs.List(ctx)
		nl, buildTime := buildLayer(t, bs, s, "base", "v2")
		start := time.Now()
		st, err := s.Rebase(ctx, old.Digest, envstore.Named("base", nl.Source, nl.Layer).Layer)
		if err != nil {
			t.Fatal(err)
		}
		rebase := time.Since(start)
		blobsAfter, _ := bs.List(ctx)
		if st.Rewritten != n || len(blobsAfter) != len(blobsBefore)+2 { // the layer and its chunk index
			t.Fatalf("N=%d: %+v, blobs %d→%d", n, st, len(blobsBefore), len(blobsAfter))
		}
		e, _ := s.Get(ctx, fmt.Sprintf("env-%d", n-1))
		if e.Layers[0].Digest != nl.Digest || e.Layers[0].Index != nl.Index || e.Layers[0].Role != "base" || e.Layers[1].Digest != tk.Digest {
			t.Fatalf("rebased env %+v", e)
		}
		t.Logf("%s N=%4d: layer build %v (%d bytes, once) + %d manifest rewrites in %v, %d bytes (%d B/env)",
			kind, n, buildTime.Round(time.Millisecond), nl.Size, st.Rewritten, rebase.Round(time.Millisecond), st.BytesWritten, st.BytesWritten/int64(n))
	}
}

func TestImagesResolver(t *testing.T) { forEachState(t, testImagesResolver) }

func testImagesResolver(t *testing.T, s *envstore.Store, bs blob.Store) {
	ctx := context.Background()
	base, _ := buildLayer(t, bs, s, "base", "v1")
	tk, _ := buildLayer(t, bs, s, "tools", "tk")
	s.Spec = "dir:/srv/blobs"
	if _, err := s.Compose(ctx, "task", "base", []string{"tools"}, ""); err != nil {
		t.Fatal(err)
	}
	r := envstore.Images{Store: s, DefaultSpec: "dir:/default"}
	img, err := r.ResolveEnv("task")
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 2 || img.Layers[0].Digest != base.Digest || img.Layers[1].Digest != tk.Digest {
		t.Fatalf("want base first then toolkit, got %+v", img.Layers)
	}
	if img.Layers[0].Store != "dir:/srv/blobs" || img.Layers[0].Size != base.Size || img.Layers[0].Role != "base" || img.Layers[1].Role != "toolkit" {
		t.Fatalf("layer %+v: want the compose-time blob store and the size", img.Layers[0])
	}
	if _, err := r.ResolveEnv("nope"); errdefs.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("missing env: %v", err)
	}
	if got := r.ListEnvs(); len(got) != 1 || got[0] != "task" {
		t.Fatalf("ListEnvs = %v", got)
	}
	// An older manifest without blob_store resolves to the node's default store.
	s.Spec = ""
	if _, err := s.Compose(ctx, "old", "base", nil, ""); err != nil {
		t.Fatal(err)
	}
	if img, _ := r.ResolveEnv("old"); img.Layers[0].Store != "dir:/default" {
		t.Fatalf("default store not used: %+v", img.Layers)
	}
}

// TestOldManifestsStillLoad: an environment manifest and a layer index entry
// written before the one manifest format resolve as before (base first, roles,
// the recorded store); the next change rewrites the manifest in the current
// format, and Remove still sees the layers it uses.
func TestOldManifestsStillLoad(t *testing.T) {
	s, bs := setup(t)
	base, _ := buildLayer(t, bs, s, "base", "v1")
	tk, _ := buildLayer(t, bs, s, "tools", "tk")
	old := fmt.Sprintf(`{"name":"legacy","base":{"digest":%q,"size":%d,"name":"base","index":%q},
		"toolkits":[{"digest":%q,"size":-1}],"blob_store":"dir:/srv/blobs","created":"2026-01-01T00:00:00Z"}`, base.Digest, base.Size, base.Index, tk.Digest)
	ctx := context.Background()
	p := filepath.Join(s.Dir, "envs", "legacy.json")
	if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	oldLayer := fmt.Sprintf(`{"name":"oldname","digest":%q,"size":%d,"source":"dir:/x","created":"2026-01-01T00:00:00Z"}`, tk.Digest, tk.Size)
	os.WriteFile(filepath.Join(s.Dir, "layers", "oldname.json"), []byte(oldLayer), 0o644)
	if l, err := s.Layer(ctx, "oldname"); err != nil || l.Digest != tk.Digest || l.Size != tk.Size || l.Source != "dir:/x" {
		t.Fatalf("old layer index entry: %+v %v", l, err)
	}
	img, err := envstore.Images{Store: s, DefaultSpec: "dir:/default"}.ResolveEnv("legacy")
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 2 || img.Layers[0].Digest != base.Digest || img.Layers[0].Role != "base" || img.Layers[0].Index != base.Index ||
		img.Layers[1].Role != "toolkit" || img.Layers[1].Size != 0 || img.Layers[0].Store != "dir:/srv/blobs" {
		t.Fatalf("old manifest resolved as %+v", img.Layers)
	}
	if err := s.Remove(ctx, "base"); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("remove a layer an old manifest uses: %v", err)
	}
	if _, err := s.SetPrefetchList(ctx, "legacy", base.Digest, tk.Digest); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), `"version": 2`) || strings.Contains(string(b), `"toolkits"`) {
		t.Fatalf("not rewritten in the current format: %s", b)
	}
	e, err := s.Get(ctx, "legacy")
	if err != nil || len(e.Layers) != 2 || e.Layers[0].PrefetchList != tk.Digest || e.Layers[1].Digest != tk.Digest || e.BlobStore != "dir:/srv/blobs" {
		t.Fatalf("after rewrite: %+v %v", e, err)
	}
}

// TestComposeKeepsConfig: the image config built layers carry reaches the
// environment (base first, upper layers over lower), and a rebase onto a layer
// with another config changes the environment's config.
func TestComposeKeepsConfig(t *testing.T) { forEachState(t, testComposeKeepsConfig) }

func testComposeKeepsConfig(t *testing.T, s *envstore.Store, bs blob.Store) {
	ctx := context.Background()
	put := func(name, content string, c *image.Config) {
		l, _ := buildLayer(t, bs, s, name, content)
		l.Config = c
		if err := s.PutLayer(context.Background(), envstore.Named(name, l.Source, l.Layer)); err != nil {
			t.Fatal(err)
		}
	}
	put("jdk", "jdk", &image.Config{Env: []string{"PATH=/opt/jdk/bin:/bin", "JAVA_HOME=/opt/jdk"}, User: "1000", Cmd: []string{"java"}})
	put("work", "work", &image.Config{WorkingDir: "/work", Env: []string{"PATH=/work/bin:/opt/jdk/bin:/bin"}})
	put("plain", "plain", nil)
	if _, err := s.Compose(ctx, "task", "jdk", []string{"plain"}, "work"); err != nil {
		t.Fatal(err)
	}
	r := envstore.Images{Store: s, DefaultSpec: "dir:/d"}
	jdk, _ := s.Layer(ctx, "jdk")
	// By digest, a layer built under a name brings its config too.
	if e, err := s.Compose(ctx, "by-digest", jdk.Digest, nil, ""); err != nil || e.Layers[0].Config == nil || e.Layers[0].Config.User != "1000" || e.Layers[0].Index != jdk.Index {
		t.Fatalf("compose by digest: %+v %v", e, err)
	}
	img, err := r.ResolveEnv("task")
	if err != nil {
		t.Fatal(err)
	}
	if c := img.Config; c == nil || !slices.Equal(c.Env, []string{"PATH=/work/bin:/opt/jdk/bin:/bin", "JAVA_HOME=/opt/jdk"}) ||
		c.User != "1000" || c.WorkingDir != "/work" || !slices.Equal(c.Cmd, []string{"java"}) {
		t.Fatalf("environment config %+v", img.Config)
	}
	put("jdk2", "jdk2", &image.Config{Env: []string{"JAVA_HOME=/opt/jdk21"}})
	jdk2, _ := s.ResolveLayer(ctx, "jdk2")
	if _, err := s.Rebase(ctx, jdk.Digest, jdk2); err != nil {
		t.Fatal(err)
	}
	img, _ = r.ResolveEnv("task")
	if c := img.Config; c == nil || !slices.Equal(c.Env, []string{"JAVA_HOME=/opt/jdk21", "PATH=/work/bin:/opt/jdk/bin:/bin"}) || c.User != "" || img.Layers[0].Name != "jdk2" {
		t.Fatalf("config after rebase %+v, layers %+v", img.Config, img.Layers)
	}
	if err := s.PutLayer(ctx, envstore.NamedLayer{Layer: image.Layer{Name: "bad", Digest: jdk.Digest, Config: &image.Config{WorkingDir: "rel"}}}); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("bad config accepted: %v", err)
	}
}
