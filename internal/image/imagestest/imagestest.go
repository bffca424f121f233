// Package imagestest makes image stores for tests. Production code must not
// import it.
package imagestest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/image"
)

// Tiny is a store with one default image, "tiny", that the mock driver can
// start (an /etc/passwd is all the agent reads).
func Tiny(t testing.TB) *image.Store {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "tiny", "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tiny", "image.json"), []byte(`{"name":"tiny","lower":["rootfs"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return &image.Store{Dir: dir, Default: "tiny"}
}
