package node

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// lockedBuffer is a log sink the daemon's goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// dockerfileContext is a build context holding only a Dockerfile.
func dockerfileContext(t *testing.T, dockerfile string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(tw, dockerfile)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// A build given registry credentials (an E2B template's fromImage with a
// username and password) pulls its FROM image from a registry the node has
// no credentials for; wrong or missing credentials fail the build with
// permission_denied; the password is in no file of the node's data
// directory and no log line, and a later create without credentials is
// refused by the registry again (the node kept none).
func TestBuildFromRegistryWithCallCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const pass = "call-only-pw-81f3"
	reg := registrytest.Start(t, "carol", pass)
	img := registrytest.Image(t, v1.Config{Env: []string{"FROM_PRIVATE=1"}}, busyboxLayer(t),
		registrytest.Layer(t, regEntry{Name: "etc/", Type: tar.TypeDir}, regEntry{Name: "etc/private-marker", Body: "private base\n"}))
	reg.Push(t, "team/private:1", img)
	ref := reg.Host + "/team/private:1"

	dir := t.TempDir()
	var logs lockedBuffer
	d, err := New(context.Background(), Config{DataDir: filepath.Join(dir, "data"), ImagesDir: DefaultImagesDir, DefaultImage: "busybox", Token: "test",
		Logger:     slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registries: registry.Config{Insecure: []string{reg.Host}, Retries: 1, MinBackoff: 1e6}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(context.Background(), true) })
	svc := d.NodeService()
	ctx := context.Background()
	build := func(name string, auth map[string]api.RegistryAuth) (api.BuildImageResult, error) {
		req := api.BuildImageRequest{Name: name, RegistryAuth: auth}
		return svc.BuildImage(ctx, req, dockerfileContext(t, "FROM "+ref+"\nRUN cp /etc/private-marker /from-base\nLABEL built=yes\n"))
	}

	for what, auth := range map[string]map[string]api.RegistryAuth{
		"no credentials":     nil,
		"wrong password":     {reg.Host: {Username: "carol", Password: "wrong"}},
		"another registry's": {"other.example:5000": {Username: "carol", Password: pass}},
	} {
		_, err := build("from-private-"+strings.ReplaceAll(what, " ", "-")[:5], auth)
		if !errdefs.Is(err, api.CodePermissionDenied) {
			t.Errorf("%s: build err %v, want permission_denied", what, err)
		}
	}

	res, err := build("from-private", map[string]api.RegistryAuth{reg.Host: {Username: "carol", Password: pass}})
	if err != nil {
		t.Fatalf("build with the registry's credentials: %v", err)
	}
	if res.Image.Config == nil || !strings.Contains(strings.Join(res.Image.Config.Env, " "), "FROM_PRIVATE=1") {
		t.Errorf("built image config %+v lacks the base's Env", res.Image.Config)
	}
	sb, err := svc.Create(ctx, api.CreateSandboxRequest{Image: "from-private"})
	if err != nil {
		t.Fatalf("create from the built image: %v", err)
	}
	if out, code := sh(t, d, sb.ID, "cat /from-base"); code != 0 || out != "private base" {
		t.Errorf("the private base's file: %q (exit %d)", out, code)
	}

	// The node kept no credentials: the tag resolves at the registry again
	// and is refused.
	if _, err := svc.Create(ctx, api.CreateSandboxRequest{Image: ref}); !errdefs.Is(err, api.CodePermissionDenied) {
		t.Errorf("create of %s without credentials after the build: %v, want permission_denied", ref, err)
	}
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		b, rerr := os.ReadFile(p)
		if rerr == nil && bytes.Contains(b, []byte(pass)) {
			t.Errorf("%s holds the registry password", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), pass) {
		t.Errorf("the node's log shows the registry password")
	}
}
