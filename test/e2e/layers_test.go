package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/pkg/api"
)

// layeredNode is a node whose layerd is stopped (by PID) after the server and its
// sandboxes are gone, so no mount or process outlives the test.
func layeredNode(t *testing.T, args ...string) *node {
	t.Helper()
	n := startNode(t, args...)
	t.Cleanup(func() {
		n.stop(true)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := lazy.NewClient(lazy.Config{Root: paths.New(n.dataDir).Layers()}).Stop(ctx); err != nil {
			t.Errorf("stop layerd: %v", err)
		}
		if m := mountsUnder(n.dataDir); len(m) > 0 {
			t.Errorf("mounts left under %s: %v", n.dataDir, m)
		}
	})
	return n
}

func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// image runs `dsec image ARGS --data-dir DATA` and fails the test on error.
func (n *node) image(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := n.cli(t, "", append(append([]string{"image"}, args...), "--data-dir", n.dataDir)...)
	if code != 0 {
		t.Fatalf("dsec image %v: exit %d: %s%s", args, code, out, errOut)
	}
	return out
}

// buildLayers builds a busybox base layer and a toolkit layer and composes env.
func (n *node) buildLayers(t *testing.T, env string) {
	t.Helper()
	tk := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tk, "opt", "tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tk, "opt", "tool", "hello.txt"), []byte("hello from the toolkit\n"), 0o644)
	n.image(t, "build", "--from", "dir:"+filepath.Join(imagesDir, "busybox", "rootfs"), "--name", "bb-base")
	n.image(t, "build", "--from", "dir:"+tk, "--name", "bb-tool")
	n.image(t, "compose", "--name", env, "--base", "bb-base", "--toolkit", "bb-tool")
}

// TestLayeredEnvironment creates sandboxes on a composed environment (EROFS layers
// in the node's blob store, mounted on demand by layerd) and checks what a user
// would: files of every layer visible, writes private to each sandbox, accounting
// in the API and CLI, removal refused while in use, and the file systems intact
// after the server is killed and restarted.
func TestLayeredEnvironment(t *testing.T) {
	if _, err := os.Stat(filepath.Join(imagesDir, "busybox", "image.json")); err != nil {
		t.Skip("busybox image missing (run `make setup`)")
	}
	n := layeredNode(t)
	ctx := context.Background()
	n.buildLayers(t, "bbenv")

	a := n.create(t, api.CreateSandboxRequest{Image: "bbenv"})
	b := n.create(t, api.CreateSandboxRequest{Image: "bbenv"})
	if r := n.sh(t, a, "cat /opt/tool/hello.txt && busybox echo base-ok"); r.Stdout != "hello from the toolkit\nbase-ok\n" {
		t.Fatalf("layers not visible: %+v", r)
	}
	n.sh(t, a, "echo mine > /opt/tool/hello.txt && echo new > /etc/added")
	if r := n.sh(t, b, "cat /opt/tool/hello.txt; test -e /etc/added && echo leaked"); r.Stdout != "hello from the toolkit\n" {
		t.Fatalf("a write in one sandbox reached its neighbour: %+v", r)
	}

	img, err := n.cl.Image(ctx, "bbenv")
	if err != nil {
		t.Fatal(err)
	}
	if img.Kind != "layered" || len(img.Layers) != 2 || img.Layers[0].Role != "base" || img.Layers[1].Role != "toolkit" {
		t.Fatalf("image: %+v", img)
	}
	base := img.Layers[0]
	// The layer's chunk index, fetched first: header, a hash per chunk and
	// the bitmap of its metadata chunks.
	chunks := (base.Size + base.ChunkSize - 1) / max(base.ChunkSize, 1)
	index := 24 + 32*chunks + (chunks+7)/8
	if !base.Mounted || base.Sandboxes != 2 || base.BytesFetched <= index || base.BytesFetched > base.Size+index || base.CacheMisses == 0 {
		t.Fatalf("base layer accounting: %+v", base)
	}
	imgs, err := n.cl.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, i := range imgs {
		found = found || i.Name == "bbenv" && i.Kind == "layered"
	}
	if !found {
		t.Fatalf("GET /v1/images lacks bbenv: %+v", imgs)
	}
	var inspect struct {
		Layers []struct {
			Role         string `json:"role"`
			BytesFetched int64  `json:"bytes_fetched"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(n.image(t, "inspect", "bbenv", "--json")), &inspect); err != nil {
		t.Fatal(err)
	}
	if len(inspect.Layers) != 2 || inspect.Layers[0].Role != "base" || inspect.Layers[0].BytesFetched != base.BytesFetched {
		t.Fatalf("image inspect: %+v (API says base fetched %d)", inspect, base.BytesFetched)
	}

	// What the sandboxes read becomes the layers' prefetch lists.
	if out := n.image(t, "record", "bbenv"); !strings.Contains(out, "prefetch list") {
		t.Fatalf("image record: %s", out)
	}
	if img, err := n.cl.Image(ctx, "bbenv"); err != nil || img.Layers[0].PrefetchList == "" {
		t.Fatalf("prefetch list not recorded: %+v %v", img, err)
	}

	if _, errOut, code := n.cli(t, "", "image", "rm", "bbenv", "--data-dir", n.dataDir); code == 0 || !strings.Contains(errOut, "in use") {
		t.Fatalf("image rm of an environment in use: exit %d, %q", code, errOut)
	}

	n.stop(false) // kill -9: layerd and the mounts must outlive the agent
	n.start()
	if r := n.sh(t, a, "cat /opt/tool/hello.txt /etc/added; ls /bin | wc -l"); !strings.HasPrefix(r.Stdout, "mine\nnew\n") || r.ExitCode != 0 {
		t.Fatalf("sandbox file system after restart: %+v", r)
	}
	// Reading everything forces chunks never fetched before through the old mount.
	if r := n.sh(t, b, "find / -xdev -type f -exec cat {} + | wc -c"); r.ExitCode != 0 || strings.TrimSpace(r.Stdout) == "0" {
		t.Fatalf("full read after restart: %+v", r)
	}

	// A new toolkit for every environment using the old one: new sandboxes get it,
	// running ones keep the layers they were created with.
	tk2 := t.TempDir()
	os.MkdirAll(filepath.Join(tk2, "opt", "tool"), 0o755)
	os.WriteFile(filepath.Join(tk2, "opt", "tool", "hello.txt"), []byte("toolkit v2\n"), 0o644)
	n.image(t, "build", "--from", "dir:"+tk2, "--name", "bb-tool-v2")
	if out := n.image(t, "rebase", "--from", "bb-tool", "--to", "bb-tool-v2"); !strings.HasPrefix(out, "1 of 1 environments") {
		t.Fatalf("rebase: %s", out)
	}
	c := n.create(t, api.CreateSandboxRequest{Image: "bbenv"})
	if r := n.sh(t, c, "cat /opt/tool/hello.txt"); r.Stdout != "toolkit v2\n" {
		t.Fatalf("sandbox after rebase: %+v", r)
	}
	if r := n.sh(t, b, "cat /opt/tool/hello.txt"); r.Stdout != "hello from the toolkit\n" {
		t.Fatalf("a running sandbox changed with the rebase: %+v", r)
	}
	if err := n.cl.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}

	if err := n.cl.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := n.cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	n.image(t, "rm", "bbenv")
	if _, err := n.cl.Image(ctx, "bbenv"); apiCode(err) != api.CodeNotFound {
		t.Fatalf("removed environment: %v", err)
	}
}

// TestLayeredEnvironmentErrors: a corrupt blob, a missing layer and an unreachable
// blob store each fail the create with a clear code, leave nothing mounted for
// it, and do not disturb a running neighbour.
func TestLayeredEnvironmentErrors(t *testing.T) {
	if _, err := os.Stat(filepath.Join(imagesDir, "busybox", "image.json")); err != nil {
		t.Skip("busybox image missing (run `make setup`)")
	}
	n := layeredNode(t)
	ctx := context.Background()
	n.buildLayers(t, "good")
	neighbour := n.create(t, api.CreateSandboxRequest{Image: "good"})

	// Each bad environment gets its own copy of the toolkit layer, so breaking it
	// leaves the neighbour's layers alone.
	envPath := func(name string) string { return filepath.Join(paths.New(n.dataDir).EnvStore(), "envs", name+".json") }
	badLayer := func(name string) (digest string) {
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, "f-"+name), []byte(strings.Repeat(name, 100000)), 0o644)
		n.image(t, "build", "--from", "dir:"+d, "--name", name)
		n.image(t, "compose", "--name", name, "--base", name)
		var e struct {
			Layers []struct{ Digest string } `json:"layers"` // base first
		}
		b, _ := os.ReadFile(envPath(name))
		if err := json.Unmarshal(b, &e); err != nil || len(e.Layers) != 1 {
			t.Fatalf("manifest %s: %s (%v)", envPath(name), b, err)
		}
		return e.Layers[0].Digest
	}
	blobPath := func(digest string) string {
		var p string
		filepath.Walk(paths.New(n.dataDir).Blobs(), func(path string, _ os.FileInfo, _ error) error {
			if strings.Contains(path, strings.TrimPrefix(digest, "sha256:")) {
				p = path
			}
			return nil
		})
		if p == "" {
			t.Fatalf("blob %s not found under %s/blobs", digest, n.dataDir)
		}
		return p
	}

	corrupt := badLayer("corrupt")
	p := blobPath(corrupt)
	st, _ := os.Stat(p)
	os.WriteFile(p, make([]byte, st.Size()), 0o644) // same size, wrong content

	missing := badLayer("missing")
	os.Remove(blobPath(missing))

	badLayer("unreachable")
	b, _ := os.ReadFile(envPath("unreachable"))
	var m map[string]any
	json.Unmarshal(b, &m)
	m["blob_store"] = "dir:/nonexistent/dsec-blobs"
	b, _ = json.Marshal(m)
	os.WriteFile(envPath("unreachable"), b, 0o644)

	before := mountsUnder(n.dataDir)
	for _, c := range []struct {
		env  string
		code api.Code
	}{
		{"corrupt", api.CodeBadGateway},
		{"missing", api.CodeNotFound},
		{"unreachable", api.CodeUnavailable},
		{"no-such-env", api.CodeNotFound},
	} {
		_, err := n.cl.Create(ctx, api.CreateSandboxRequest{Image: c.env})
		if apiCode(err) != c.code {
			t.Errorf("create on %s: %v (code %q), want %s", c.env, err, apiCode(err), c.code)
		}
	}
	if after := mountsUnder(n.dataDir); len(after) != len(before) {
		t.Errorf("failed creates left mounts: before %v, after %v", before, after)
	}
	if sbs, _ := n.cl.List(ctx); len(sbs) != 1 {
		t.Errorf("failed creates left sandboxes: %+v", sbs)
	}
	if r := n.sh(t, neighbour, "cat /opt/tool/hello.txt"); r.Stdout != "hello from the toolkit\n" {
		t.Fatalf("neighbour disturbed: %+v", r)
	}
}

// TestImagesAPI composes, records and removes an environment through the HTTP API
// (layers built with the CLI), with the errors a client must be able to tell apart.
func TestImagesAPI(t *testing.T) {
	if _, err := os.Stat(filepath.Join(imagesDir, "busybox", "image.json")); err != nil {
		t.Skip("busybox image missing (run `make setup`)")
	}
	n := layeredNode(t)
	ctx := context.Background()
	n.buildLayers(t, "cli-env")
	img, err := n.cl.ComposeImage(ctx, api.ComposeImageRequest{Name: "api-env", Base: "bb-base", Toolkits: []string{"bb-tool"}})
	if err != nil || img.Kind != "layered" || len(img.Layers) != 2 || img.Layers[1].Role != "toolkit" {
		t.Fatalf("compose: %+v %v", img, err)
	}
	for _, c := range []struct {
		req  api.ComposeImageRequest
		code api.Code
	}{
		{api.ComposeImageRequest{Name: "x", Base: "no-such-layer"}, api.CodeNotFound},
		{api.ComposeImageRequest{Name: "Bad Name", Base: "bb-base"}, api.CodeInvalidArgument},
		{api.ComposeImageRequest{Name: "x"}, api.CodeInvalidArgument},
	} {
		if _, err := n.cl.ComposeImage(ctx, c.req); apiCode(err) != c.code {
			t.Errorf("compose %+v: %v, want %s", c.req, err, c.code)
		}
	}
	if _, err := n.cl.RecordImage(ctx, "api-env"); apiCode(err) != api.CodeConflict {
		t.Errorf("record before any read: %v, want conflict", err)
	}
	id := n.create(t, api.CreateSandboxRequest{Image: "api-env"})
	if r := n.sh(t, id, "cat /opt/tool/hello.txt"); r.Stdout != "hello from the toolkit\n" {
		t.Fatalf("sandbox on the composed env: %+v", r)
	}
	rec, err := n.cl.RecordImage(ctx, "api-env")
	if err != nil || len(rec) == 0 || rec[0].Chunks == 0 || rec[0].List == "" {
		t.Fatalf("record: %+v %v", rec, err)
	}
	if err := n.cl.DeleteImage(ctx, "api-env"); apiCode(err) != api.CodeConflict {
		t.Fatalf("delete while in use: %v", err)
	}
	if err := n.cl.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := n.cl.DeleteImage(ctx, "api-env"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := n.cl.Image(ctx, "api-env"); apiCode(err) != api.CodeNotFound {
		t.Fatalf("after delete: %v", err)
	}
	if err := n.cl.DeleteImage(ctx, "api-env"); apiCode(err) != api.CodeNotFound {
		t.Fatalf("second delete: %v", err)
	}
}
