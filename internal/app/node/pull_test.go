package node

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

type regEntry = registrytest.Entry

// busyboxLayer is the busybox image's tree as an OCI layer.
func busyboxLayer(t *testing.T) v1.Layer {
	bb, err := (&image.Store{Dir: DefaultImagesDir}).Resolve("busybox")
	if err != nil || len(bb.Lower()) != 1 {
		t.Skipf("needs the busybox image in %s (make setup): %v", DefaultImagesDir, err)
	}
	out, err := exec.Command("tar", "-C", bb.Lower()[0], "--numeric-owner", "-cf", "-", ".").Output()
	if err != nil {
		t.Fatalf("tar busybox: %v", err)
	}
	return registrytest.LayerFromTar(t, out)
}

// pullNode starts a node whose registries are a token-auth test registry
// (credentials in a Docker config.json, plain HTTP allowed for it).
func pullNode(t *testing.T) (*Daemon, *registrytest.Registry) {
	t.Helper()
	return pullNodeWith(t, nil)
}

// pullNodeWith is pullNode with the registry config changed by mut.
func pullNodeWith(t *testing.T, mut func(reg *registrytest.Registry, c *registry.Config)) (*Daemon, *registrytest.Registry) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	reg := registrytest.Start(t, "alice", "s3cret")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host, auth)), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := registry.Config{DockerConfig: cfg, Insecure: []string{reg.Host}, Retries: 1, MinBackoff: 1e6}
	if mut != nil {
		mut(reg, &rc)
	}
	d, err := New(context.Background(), Config{DataDir: filepath.Join(dir, "data"), ImagesDir: DefaultImagesDir, DefaultImage: "busybox", Token: "test",
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registries: rc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(context.Background(), true) })
	return d, reg
}

func sh(t *testing.T, d *Daemon, id, script string) (string, int) {
	t.Helper()
	r, err := d.Manager.Exec(context.Background(), id, api.ExecRequest{Shell: script, TimeoutMs: 30000})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return strings.TrimSpace(r.Stdout + r.Stderr), r.ExitCode
}

// TestCreateByReference creates sandboxes from an image in a registry by tag
// and by digest: its layers are stacked with whiteouts and opaque dirs
// honoured, its config applies, GET shows the reference and digest, and a
// tag moved later leaves the sandbox on its digest.
func TestCreateByReference(t *testing.T) {
	d, reg := pullNode(t)
	ctx := context.Background()
	app := registrytest.Layer(t,
		regEntry{Name: "etc/app.conf", Body: "secret"},
		regEntry{Name: "data/", Type: tar.TypeDir},
		regEntry{Name: "data/old/", Type: tar.TypeDir},
		regEntry{Name: "data/old/stale", Body: "stale"},
		regEntry{Name: "data/keep", Body: "keep"},
		regEntry{Name: "data/hard", Type: tar.TypeLink, Linkname: "data/keep"},
		regEntry{Name: "etc/hard3", Type: tar.TypeLink, Linkname: "data/keep"},
	)
	top := registrytest.Layer(t,
		regEntry{Name: "etc/.wh.app.conf"},
		regEntry{Name: "data/old/", Type: tar.TypeDir},
		regEntry{Name: "data/old/.wh..wh..opq"},
		regEntry{Name: "data/old/new", Body: "new"},
		regEntry{Name: "data/link", Type: tar.TypeSymlink, Linkname: "/data/keep"},
	)
	cfg := v1.Config{Env: []string{"PATH=/bin:/sbin:/usr/bin", "APP_MODE=test"}, WorkingDir: "/data", Cmd: []string{"sh"},
		Labels: map[string]string{"org.example.task": "t1"}, ExposedPorts: map[string]struct{}{"8000/tcp": {}}}
	v1dg := reg.Push(t, "tasks/app:v1", registrytest.Image(t, cfg, busyboxLayer(t), app, top))

	ref := reg.Host + "/tasks/app:v1"
	sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Image != ref || sb.ImageRef != ref || sb.ImageDigest != v1dg {
		t.Fatalf("sandbox image %q ref %q digest %q, want %q at %s", sb.Image, sb.ImageRef, sb.ImageDigest, ref, v1dg)
	}
	for _, c := range []struct{ script, want string }{
		{"pwd", "/data"},
		{"echo $APP_MODE", "test"},
		{"ls /data/old", "new"},
		{"cat /data/hard /data/link", "keepkeep"},
		// The 3 names of one inode in the layer: one inode number, 3 links.
		{"stat -c '%i %h' /data/keep /data/hard /etc/hard3 | sort -u | sed 's/^[0-9]* //'", "3"},
		{"test -e /etc/app.conf || echo gone", "gone"},
		{"echo hi > /data/old/w && cat /data/old/w", "hi"},
	} {
		if out, code := sh(t, d, sb.ID, c.script); code != 0 || out != c.want {
			t.Errorf("%s: %q (exit %d), want %q", c.script, out, code, c.want)
		}
	}

	byDigest, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: reg.Host + "/tasks/app@" + v1dg})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := sh(t, d, byDigest.ID, "ls /data/old; cat /data/keep"); out != "new\nkeep" || byDigest.ImageDigest != v1dg {
		t.Fatalf("by digest: %q, digest %s", out, byDigest.ImageDigest)
	}

	// The tag moves: the first sandbox keeps its digest and files; a new
	// create gets the new image.
	v2dg := reg.Push(t, "tasks/app:v1", registrytest.Image(t, cfg, busyboxLayer(t), registrytest.Layer(t, regEntry{Name: "data/version", Body: "2"})))
	again, err := d.Manager.Get(ctx, sb.ID)
	if err != nil || again.ImageDigest != v1dg {
		t.Fatalf("after the tag moved: %+v %v", again, err)
	}
	if out, _ := sh(t, d, sb.ID, "ls /data/old"); out != "new\nw" {
		t.Fatalf("first sandbox after the tag moved: %q", out)
	}
	// A fork after the tag moved: the children get the parent's digest.
	fr, err := d.Manager.Fork(ctx, sb.ID, api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatalf("fork after the tag moved: %v", err)
	}
	if c := fr.Children[0]; c.ImageDigest != v1dg {
		t.Fatalf("child digest %s, want the parent's %s", c.ImageDigest, v1dg)
	}
	if out, _ := sh(t, d, fr.Children[0].ID, "ls /data/old; test -e /data/version || echo no-v2"); out != "new\nw\nno-v2" {
		t.Fatalf("child after the tag moved: %q", out)
	}
	moved, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := sh(t, d, moved.ID, "cat /data/version"); out != "2" || moved.ImageDigest != v2dg {
		t.Fatalf("new create after the tag moved: %q digest %s, want 2 at %s", out, moved.ImageDigest, v2dg)
	}

	// GET /v1/images/{ref} (dsec image pull) and the image list.
	img, err := d.Manager.Image(ctx, reg.Host+"/tasks/app@"+v1dg)
	if err != nil || img.Digest != v1dg || len(img.Layers) != 3 || img.Config.Labels["org.example.task"] != "t1" {
		t.Fatalf("image view %+v %v", img, err)
	}
	list, err := d.Manager.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, im := range list {
		if im.Ref == ref && im.Digest == v2dg {
			found = true
		}
	}
	if !found {
		t.Fatalf("image list has no %s at %s: %+v", ref, v2dg, list)
	}
}

// TestCreateByReferenceBadInput: each bad reference is refused with its code,
// nothing is created and the sandbox already there still answers.
func TestCreateByReferenceBadInput(t *testing.T) {
	d, reg := pullNode(t)
	ctx := context.Background()
	reg.Push(t, "ok:1", registrytest.Image(t, v1.Config{User: "1000"}, busyboxLayer(t)))
	other := registrytest.Image(t, v1.Config{}, registrytest.Layer(t, regEntry{Name: "f", Body: "f"}))
	reg.PushIndex(t, "foreign:1", registrytest.Index(t, map[string]v1.Image{"linux/s390x": other}))
	keep, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: reg.Host + "/ok:1"})
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]api.Code{
		"UPPER/Case:tag!":        api.CodeInvalidArgument,
		reg.Host + "/nosuch:1":   api.CodeNotFound,
		reg.Host + "/ok:missing": api.CodeNotFound,
		reg.Host + "/foreign:1":  api.CodeNotFound,
		"127.0.0.1:1/down:1":     api.CodeUnavailable,
	} {
		_, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: ref})
		if errdefs.CodeOf(err) != want {
			t.Errorf("%s: %v (code %s), want %s", ref, err, errdefs.CodeOf(err), want)
		}
	}
	list, err := d.Manager.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("sandboxes after the refusals: %d %v, want the one", len(list), err)
	}
	// (and it runs as the image's User)
	if out, code := sh(t, d, keep.ID, "id -u"); out != "1000" || code != 0 {
		t.Fatalf("the sandbox already there: %q %d", out, code)
	}
}

// TestConcurrentCreatesFetchOnce: creates of a never-seen image at once share
// one fetch of each of its blobs.
func TestConcurrentCreatesFetchOnce(t *testing.T) {
	d, reg := pullNode(t)
	ctx := context.Background()
	dg := reg.Push(t, "burst:1", registrytest.Image(t, v1.Config{}, busyboxLayer(t), registrytest.Layer(t, regEntry{Name: "task", Body: "x"})))
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: reg.Host + "/burst:1"})
			if err == nil && sb.ImageDigest != dg {
				err = fmt.Errorf("digest %s, want %s", sb.ImageDigest, dg)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	gets := reg.BlobGets()
	if len(gets) != 3 { // config and two layers
		t.Errorf("blobs fetched: %v, want 3", gets)
	}
	for b, k := range gets {
		if k != 1 {
			t.Errorf("blob %s fetched %d times, want once", b, k)
		}
	}
}

// TestCreateShortNameThroughMirror: a Docker Hub short name is served by the
// mirror a hosts.toml names for docker.io (Docker Hub itself never asked).
func TestCreateShortNameThroughMirror(t *testing.T) {
	d, reg := pullNodeWith(t, func(reg *registrytest.Registry, c *registry.Config) {
		c.HostsDir = t.TempDir()
		if err := os.MkdirAll(filepath.Join(c.HostsDir, "docker.io"), 0o755); err != nil {
			t.Fatal(err)
		}
		toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+reg.Host, "http://"+reg.Host)
		if err := os.WriteFile(filepath.Join(c.HostsDir, "docker.io", "hosts.toml"), []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	dg := reg.Push(t, "library/pyish:3.12-slim", registrytest.Image(t, v1.Config{}, busyboxLayer(t), registrytest.Layer(t, regEntry{Name: "py", Body: "3.12"})))
	sb, err := d.Manager.Create(context.Background(), api.CreateSandboxRequest{Image: "pyish:3.12-slim"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ImageRef != "docker.io/library/pyish:3.12-slim" || sb.ImageDigest != dg {
		t.Fatalf("ref %q digest %q, want Docker Hub's library/pyish at %s", sb.ImageRef, sb.ImageDigest, dg)
	}
	if out, code := sh(t, d, sb.ID, "cat /py"); out != "3.12" || code != 0 {
		t.Fatalf("cat /py: %q %d", out, code)
	}
}
