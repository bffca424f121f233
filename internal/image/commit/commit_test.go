package commit_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/commit"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/pkg/api"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPack: a directory image base becomes a layer once (a second commit
// reuses it), the commit layer goes on top, the image config is kept, the
// environment is all blobs, and an existing name is refused untouched.
func TestPack(t *testing.T) {
	ctx := context.Background()
	bs, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	es, err := envstore.Open(t.TempDir(), bs)
	if err != nil {
		t.Fatal(err)
	}
	es.Spec = "dir:/blobs"
	base := t.TempDir()
	write(t, base+"/etc/os", "base\n")
	rw1, rw2 := t.TempDir(), t.TempDir()
	write(t, rw1+"/app/a", "one\n")
	write(t, rw2+"/app/b", "two\n")
	p := &commit.Packer{Blobs: bs, Envs: es, TempDir: t.TempDir()}
	img := image.Image{Name: "tiny", Layers: []image.Layer{{Dir: base}}, Config: &image.Config{WorkingDir: "/app"}}

	r1, err := p.Pack(ctx, "env-one", img, []string{rw1})
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Image.Layers) != 2 || r1.Image.Layers[0].Role != image.RoleBase || r1.Layer != r1.Image.Layers[1] {
		t.Fatalf("result %+v", r1)
	}
	m, err := es.Get(ctx, "env-one")
	if err != nil {
		t.Fatal(err)
	}
	if m.Config == nil || m.Config.WorkingDir != "/app" || m.BlobStore != "dir:/blobs" {
		t.Fatalf("manifest %+v", m)
	}
	for _, l := range m.Layers {
		if l.Digest == "" || l.Dir != "" {
			t.Fatalf("manifest layer %+v is not a blob", l)
		}
		if _, err := bs.Stat(ctx, l.Digest); err != nil {
			t.Fatal(err)
		}
	}
	names, _ := es.ListLayers(ctx)
	r2, err := p.Pack(ctx, "env-two", img, []string{rw2})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Image.Layers[0].Digest != r1.Image.Layers[0].Digest || r2.Layer.Digest == r1.Layer.Digest {
		t.Fatalf("base not reused or layers mixed up: %+v / %+v", r1.Image.Layers, r2.Image.Layers)
	}
	if again, _ := es.ListLayers(ctx); len(again) != len(names) || len(names) != 1 {
		t.Fatalf("layer index %v then %v: want the one base layer", names, again)
	}
	// The name exists: already_exists, the manifest unchanged.
	_, err = p.Pack(ctx, "env-one", img, []string{rw2})
	if errdefs.CodeOf(err) != api.CodeAlreadyExists {
		t.Fatalf("second commit to env-one: %v", err)
	}
	if m2, _ := es.Get(ctx, "env-one"); m2.Layers[1].Digest != r1.Layer.Digest {
		t.Fatal("env-one was replaced")
	}
}
