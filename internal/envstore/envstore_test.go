package envstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/blob"
	"github.com/dsec-dev/dsec/internal/envstore"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/layer"
	"github.com/dsec-dev/dsec/pkg/api"
)

func setup(t testing.TB) (*envstore.Store, blob.Store) {
	bs, err := blob.NewDir(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := envstore.Open(t.TempDir(), bs)
	if err != nil {
		t.Fatal(err)
	}
	return s, bs
}

func buildLayer(t testing.TB, bs blob.Store, s *envstore.Store, name, content string) (layer.Layer, time.Duration) {
	d := t.(interface{ TempDir() string }).TempDir()
	os.WriteFile(filepath.Join(d, "version"), []byte(content), 0o644)
	os.WriteFile(filepath.Join(d, "payload"), make([]byte, 4<<20), 0o644)
	start := time.Now()
	l, err := layer.Build(context.Background(), layer.Source{Kind: "dir", Arg: d}, bs, layer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if err := s.PutLayer(envstore.NamedLayer{Name: name, Digest: l.Digest, Size: l.Size, Source: l.Source}); err != nil {
		t.Fatal(err)
	}
	return l, el
}

func TestComposeGetRemove(t *testing.T) {
	s, bs := setup(t)
	ctx := context.Background()
	base, _ := buildLayer(t, bs, s, "base", "v1")
	tk, _ := buildLayer(t, bs, s, "py-tools", "tk")
	e, err := s.Compose(ctx, "task-1", "base", []string{"py-tools"}, tk.Digest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("task-1")
	if err != nil || got.Base.Digest != base.Digest || len(got.Toolkits) != 1 || got.Workspace == nil {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if r := []string{e.Role(0), e.Role(1), e.Role(2)}; r[0] != "workspace" || r[1] != "toolkit" || r[2] != "base" {
		t.Fatalf("roles %v", r)
	}
	if ls := e.Layers(); len(ls) != 3 || ls[2].Digest != base.Digest || ls[0].Digest != tk.Digest {
		t.Fatalf("layers order %+v", ls)
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
	if err := s.Remove("base"); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("remove used layer: %v", err)
	}
	s.InUse = func(n string) bool { return n == "task-1" }
	if err := s.Remove("task-1"); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("remove in-use env: %v", err)
	}
	s.InUse = nil
	if err := s.Remove("task-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("base"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("base"); !errdefs.Is(err, api.CodeNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
	if l, _ := s.List(); len(l) != 0 {
		t.Fatalf("list = %v", l)
	}
}

// TestRebaseScaling: updating the base of N environments = one layer build (cost
// independent of N) + N small manifest rewrites.
func TestRebaseScaling(t *testing.T) {
	for _, n := range []int{10, 100, 1000} {
		s, bs := setup(t)
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
		st, err := s.Rebase(ctx, old.Digest, envstore.LayerRef{Digest: nl.Digest, Size: nl.Size, Name: "base", Index: nl.Index})
		if err != nil {
			t.Fatal(err)
		}
		rebase := time.Since(start)
		blobsAfter, _ := bs.List(ctx)
		if st.Rewritten != n || len(blobsAfter) != len(blobsBefore)+2 { // the layer and its chunk index
			t.Fatalf("N=%d: %+v, blobs %d→%d", n, st, len(blobsBefore), len(blobsAfter))
		}
		e, _ := s.Get(fmt.Sprintf("env-%d", n-1))
		if e.Base.Digest != nl.Digest || e.Base.Index != nl.Index || e.Toolkits[0].Digest != tk.Digest {
			t.Fatalf("rebased env %+v", e)
		}
		t.Logf("N=%4d: layer build %v (%d bytes, once) + %d manifest rewrites in %v, %d bytes (%d B/env)",
			n, buildTime.Round(time.Millisecond), nl.Size, st.Rewritten, rebase.Round(time.Millisecond), st.BytesWritten, st.BytesWritten/int64(n))
	}
}

func TestImagesResolver(t *testing.T) {
	s, bs := setup(t)
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
