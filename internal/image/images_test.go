package image

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tiny", "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tiny", "image.json"), []byte(`{"name":"tiny","lower":["rootfs"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Store{Dir: dir, Default: "tiny"}
	img, err := s.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "tiny" || len(img.Lower()) != 1 || img.Lower()[0] != filepath.Join(dir, "tiny", "rootfs") || img.Layers[0].Role != RoleBase || img.Layered() {
		t.Fatalf("bad image %+v", img)
	}
	if _, err := s.Resolve("nope"); errdefs.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("missing image: %v", err)
	}
	if _, err := s.Resolve("../etc"); errdefs.CodeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("bad name: %v", err)
	}
	if got := s.List(); len(got) != 1 || got[0] != "tiny" {
		t.Fatalf("list = %v", got)
	}
}

type envs map[string]Image

func (e envs) ResolveEnv(name string) (Image, error) {
	if img, ok := e[name]; ok {
		return img, nil
	}
	return Image{}, errdefs.NotFound("environment %q not found", name)
}

func (e envs) ListEnvs() []string {
	var out []string
	for n := range e {
		out = append(out, n)
	}
	return out
}

func TestResolveEnvFallback(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tiny", "rootfs"), 0o755)
	os.WriteFile(filepath.Join(dir, "tiny", "image.json"), []byte(`{"name":"tiny","lower":["rootfs"]}`), 0o644)
	layered := Image{Name: "task", Layers: []Layer{{Digest: "sha256:00", Store: "dir:/b"}}}
	s := &Store{Dir: dir, Envs: envs{"task": layered, "tiny": {Name: "tiny", Layers: []Layer{{Store: "shadowed"}}}}}
	img, err := s.Resolve("task")
	if err != nil || len(img.Layers) != 1 || img.Layers[0].Store != "dir:/b" {
		t.Fatalf("env: %+v %v", img, err)
	}
	if img, err := s.Resolve("tiny"); err != nil || img.Layered() || len(img.Lower()) != 1 {
		t.Fatalf("a directory image must win over an environment of the same name: %+v %v", img, err)
	}
	if _, err := s.Resolve("none"); errdefs.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("missing: %v", err)
	}
	if got := s.List(); len(got) != 2 || got[0] != "task" || got[1] != "tiny" {
		t.Fatalf("List = %v", got)
	}
	if err := s.Mount(t.Context(), &img, "sb1"); errdefs.CodeOf(err) != api.CodeNotImplemented {
		t.Fatalf("mount without a layer service: %v", err)
	}
}

func TestView(t *testing.T) {
	if v := (Image{Name: "tiny", Layers: []Layer{{Dir: "/x"}}}).View(nil, true); v.Kind != "directory" || !v.Default || len(v.Layers) != 0 || v.Config != nil {
		t.Fatalf("directory view %+v", v)
	}
	img := Image{Name: "env", Layers: []Layer{{Digest: "sha256:b", Role: "base", Size: 100}, {Digest: "sha256:t", Role: "toolkit"}}}
	v := img.View(map[string]LayerUsage{"sha256:b": {BytesFetched: 10, Mounted: true, Holders: 2}, "sha256:t": {BlobSize: 50, BytesFetched: 5}}, false)
	if v.Kind != "layered" || v.Default || len(v.Layers) != 2 || v.Layers[0].Role != "base" || !v.Layers[0].Mounted || v.Layers[0].Sandboxes != 2 {
		t.Fatalf("layered view %+v", v)
	}
	if v.Layers[1].Size != 50 || v.Size != 150 || v.BytesFetched != 15 {
		t.Fatalf("sizes: layer %d, total %d, fetched %d (want a size from the blob when the manifest has none)", v.Layers[1].Size, v.Size, v.BytesFetched)
	}
}
