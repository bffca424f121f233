// Package pulltest makes a real image puller (internal/image/pull) for tests:
// credentials for a registrytest registry in a Docker config.json, the
// registry allowed over plain HTTP, blobs and records in the test's
// temporary directory.
package pulltest

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
)

// New returns a puller of reg's images that logs in as user:pass (the
// credentials registrytest.Start was given).
func New(t testing.TB, reg *registrytest.Registry, user, pass string) *pull.Puller {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host, auth)), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := registry.New(registry.Config{DockerConfig: cfg, Insecure: []string{reg.Host}})
	if err != nil {
		t.Fatal(err)
	}
	spec := "dir:" + filepath.Join(dir, "blobs")
	bs, err := blob.Open(spec, true)
	if err != nil {
		t.Fatal(err)
	}
	return &pull.Puller{Registry: rc, Blobs: bs, Spec: spec, Dir: filepath.Join(dir, "pull")}
}
