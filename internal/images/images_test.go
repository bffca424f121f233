package images

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
	if img.Name != "tiny" || len(img.Lower) != 1 || img.Lower[0] != filepath.Join(dir, "tiny", "rootfs") {
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
