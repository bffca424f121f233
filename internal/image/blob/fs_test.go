package blob_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/blob/blobtest"
)

func TestDirConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := blob.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestPOSIXConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := blob.NewPOSIX(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// Two "nodes" sharing one mount: each has its own Store over the same directory.
func TestPOSIXTwoNodesNoTempLeft(t *testing.T) {
	dir := t.TempDir()
	blobtest.Run(t, func(t *testing.T) blob.Store {
		sub := filepath.Join(dir, t.Name())
		os.MkdirAll(sub, 0o755)
		a, _ := blob.NewPOSIX(sub)
		b, _ := blob.NewPOSIX(sub)
		return &alternating{a: a, b: b}
	})
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && filepath.Base(p)[0] == '.' && !fi.IsDir() {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})
}

func TestPOSIXMissingMount(t *testing.T) {
	if _, err := blob.NewPOSIX("/nonexistent/mount"); err == nil {
		t.Fatal("missing mount accepted")
	}
}
