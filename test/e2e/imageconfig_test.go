package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/dsec-dev/dsec/pkg/api"
)

// ociToolLayout writes an OCI image layout: one layer (/work, writable by
// anyone, and /opt/tool/bin/hello) and a config setting PATH, JAVA_HOME, the
// working directory, the user, an entrypoint and a cmd.
func ociToolLayout(t *testing.T, javaHome string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	script := "#!/bin/sh\necho hello from the tool\n"
	for _, h := range []tar.Header{
		{Name: "work/", Typeflag: tar.TypeDir, Mode: 0o777},
		{Name: "opt/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "opt/tool/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "opt/tool/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "opt/tool/bin/hello", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(script))},
	} {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Write([]byte(script))
	tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/opt/tool/bin:/bin:/usr/bin", "JAVA_HOME=" + javaHome},
		WorkingDir: "/work", User: "1000", Entrypoint: []string{"/opt/tool/bin/hello"}, Cmd: []string{"--greet"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImageConfigFromOCI: an OCI image's config (built with `dsec image build
// --from oci-layout:`) applies to every exec in a sandbox of an environment that
// uses it, the request's env, cwd and user override it, GET /v1/images and
// `dsec image inspect` show it, a rebase onto a new build changes new sandboxes
// but not a running one, and an environment without a config behaves as before.
func TestImageConfigFromOCI(t *testing.T) {
	if _, err := os.Stat(filepath.Join(imagesDir, "busybox", "image.json")); err != nil {
		t.Skip("busybox image missing (run `make setup`)")
	}
	n := layeredNode(t)
	ctx := context.Background()
	n.image(t, "build", "--from", "dir:"+filepath.Join(imagesDir, "busybox", "rootfs"), "--name", "bb-base")
	if out := n.image(t, "build", "--from", "oci-layout:"+ociToolLayout(t, "/opt/jdk17"), "--name", "oci-tool"); !strings.Contains(out, "image config kept") {
		t.Fatalf("build output: %s", out)
	}
	n.image(t, "compose", "--name", "ocienv", "--base", "bb-base", "--toolkit", "oci-tool")
	n.image(t, "compose", "--name", "plainenv", "--base", "bb-base")

	const probe = `echo $PATH $JAVA_HOME; pwd; id -u`
	a := n.create(t, api.CreateSandboxRequest{Image: "ocienv"})
	if r := n.sh(t, a, probe); r.Stdout != "/opt/tool/bin:/bin:/usr/bin /opt/jdk17\n/work\n1000\n" || r.ExitCode != 0 {
		t.Fatalf("image config not applied: %+v", r)
	}
	if r := n.sh(t, a, "hello && touch here && ls -n here | awk '{print $3}'"); r.Stdout != "hello from the tool\n1000\n" {
		t.Fatalf("tool on the image's PATH, files owned by the image's user: %+v", r)
	}
	r, err := n.cl.Exec(ctx, a, api.ExecRequest{Shell: probe, Env: map[string]string{"PATH": "/bin", "JAVA_HOME": "/mine"}, Cwd: "/", User: "root"})
	if err != nil || r.Stdout != "/bin /mine\n/\n0\n" {
		t.Fatalf("request overrides: %+v %v", r, err)
	}

	img, err := n.cl.Image(ctx, "ocienv")
	if err != nil || img.Config == nil || img.Config.WorkingDir != "/work" || img.Config.User != "1000" ||
		strings.Join(img.Config.Entrypoint, " ") != "/opt/tool/bin/hello" || strings.Join(img.Config.Cmd, " ") != "--greet" {
		t.Fatalf("GET /v1/images/ocienv config: %+v %v", img.Config, err)
	}
	var inspect struct {
		Config *api.ImageConfig `json:"config"`
	}
	if err := json.Unmarshal([]byte(n.image(t, "inspect", "ocienv", "--json")), &inspect); err != nil || inspect.Config == nil ||
		strings.Join(inspect.Config.Cmd, " ") != "--greet" || len(inspect.Config.Env) != 2 {
		t.Fatalf("image inspect config: %+v %v", inspect.Config, err)
	}

	var dirImg struct {
		Kind     string `json:"kind"`
		Manifest struct {
			Layers []struct{ Role, Dir string } `json:"layers"`
		} `json:"manifest"`
	}
	if err := json.Unmarshal([]byte(n.image(t, "inspect", "busybox", "--images-dir", imagesDir)), &dirImg); err != nil ||
		dirImg.Kind != "directory" || len(dirImg.Manifest.Layers) != 1 || dirImg.Manifest.Layers[0].Role != "base" {
		t.Fatalf("image inspect of a directory image: %+v %v", dirImg, err)
	}

	// No config: the defaults of before (root, /root, dsec's PATH).
	p := n.create(t, api.CreateSandboxRequest{Image: "plainenv"})
	if r := n.sh(t, p, probe); r.Stdout != "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n/root\n0\n" {
		t.Fatalf("environment without a config: %+v", r)
	}
	if img, err := n.cl.Image(ctx, "plainenv"); err != nil || img.Config != nil {
		t.Fatalf("plainenv config: %+v %v", img, err)
	}

	// A new build of the tool: the rebase reaches new sandboxes, not a running one
	// (also not after a server restart).
	n.image(t, "build", "--from", "oci-layout:"+ociToolLayout(t, "/opt/jdk21"), "--name", "oci-tool-v2")
	n.image(t, "rebase", "--from", "oci-tool", "--to", "oci-tool-v2")
	b := n.create(t, api.CreateSandboxRequest{Image: "ocienv"})
	if r := n.sh(t, b, `echo $JAVA_HOME`); r.Stdout != "/opt/jdk21\n" {
		t.Fatalf("new sandbox after rebase: %+v", r)
	}
	n.stop(false)
	n.start()
	if r := n.sh(t, a, `echo $JAVA_HOME; pwd`); r.Stdout != "/opt/jdk17\n/work\n" {
		t.Fatalf("running sandbox after rebase and restart: %+v", r)
	}
	for _, id := range []string{a, b, p} {
		if err := n.cl.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
