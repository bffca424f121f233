package build_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/build"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// crashEnv makes this test binary the child of TestBuildKill9: a node on
// the data dir the variable names, serving /v1 (its URL in DIR/url), that
// builds crashDockerfile until it is killed.
const crashEnv = "DSEC_BUILD_CRASH_CHILD"

// The second RUN writes 64 MiB and then the marker the parent waits for:
// the step's commit (packing and storing its layer) starts right after.
const crashDockerfile = "FROM debian\nRUN echo one > /one.txt\nRUN head -c 67108864 /dev/urandom > /big && touch /crash-marker\n"

func crashChild(dir string) int {
	ctx := context.Background()
	d, err := node.New(ctx, node.Config{DataDir: dir, ImagesDir: node.DefaultImagesDir, DefaultImage: "debian", Token: "test",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	srv := httptest.NewServer(d.Handler())
	if err := os.WriteFile(filepath.Join(dir, "url"), []byte(srv.URL), 0o600); err != nil {
		return 2
	}
	_, err = d.Builder.Build(ctx, build.Request{BuildImageRequest: api.BuildImageRequest{Name: "crash"},
		DockerfileText: []byte(crashDockerfile), ContextDir: dir})
	fmt.Fprintln(os.Stderr, "the child was not killed:", err)
	return 3
}

// TestBuildKill9: a node killed with SIGKILL while a build commits a step
// (the RUN has just ended; its 64 MiB layer is being packed and stored)
// leaves nothing half-written that a build or a create could use: after a
// restart on the same data dir, every environment (cache entries included)
// names only blobs that are in the store whole (their digest checks), and
// the same build succeeds, redoing what was not committed, with a usable
// image.
func TestBuildKill9(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(filepath.Join(node.DefaultImagesDir, "debian", "image.json")); err != nil {
		t.Skipf("needs the debian image in %s (make setup): %v", node.DefaultImagesDir, err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	cmd := osexec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	// Wait for the marker in the second RUN's sandbox, then kill.
	var cl *client.Client
	var early error
	exitedEarly := false
	reached := testwait.Until(3*time.Minute, func() bool {
		select {
		case early = <-exited:
			exitedEarly = true
			return true
		default:
		}
		if cl == nil {
			if u, err := os.ReadFile(filepath.Join(dir, "url")); err == nil {
				cl = client.New(string(u), "test")
			}
		}
		return cl != nil && marked(ctx, cl)
	})
	if exitedEarly {
		killed = true
		t.Fatalf("the child exited before the kill: %v\n%s", early, stderr.String())
	}
	if !reached {
		t.Fatalf("the child's build never reached the second RUN's end; stderr:\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	killed = true

	d, err := node.New(ctx, node.Config{DataDir: dir, ImagesDir: node.DefaultImagesDir, DefaultImage: "debian", Token: "test",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(context.Background(), true) })
	// The killed build's sandboxes may be recovered: delete them.
	if sbs, err := d.Manager.List(ctx); err == nil {
		for _, sb := range sbs {
			_ = d.Manager.Delete(ctx, sb.ID)
		}
	}
	names, err := d.Builder.Envs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		m, err := d.Builder.Envs.Get(ctx, n)
		if err != nil {
			t.Fatalf("environment %s after the kill: %v", n, err)
		}
		for _, l := range m.Layers {
			if l.Digest == "" {
				continue
			}
			rc, err := d.Builder.Envs.Blobs.Open(ctx, l.Digest)
			if err != nil {
				t.Fatalf("environment %s names layer %s, which is not in the store: %v", n, l.Digest, err)
			}
			got, _, err := blob.FromReader(rc)
			rc.Close()
			if err != nil || got != l.Digest {
				t.Fatalf("environment %s: layer %s reads back as %s (%v)", n, l.Digest, got, err)
			}
		}
	}
	res, err := buildIn(t, d, "crash", dir, crashDockerfile, nil)
	if err != nil {
		t.Fatalf("the build after the kill: %v", err)
	}
	if len(res.Steps) < 3 || !res.Steps[1].Cached {
		t.Fatalf("the first RUN (committed before the kill) was not a cache hit: %+v", res.Steps)
	}
	sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Backend: "container", Image: "crash"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Manager.Delete(ctx, sb.ID)
	if got := exec(t, d, sb.ID, "cat /one.txt; stat -c %s /big; test -e /crash-marker && echo marked"); got != "one\n67108864\nmarked" {
		t.Fatalf("image built after the kill: %q", got)
	}
}

// marked reports whether a build sandbox of the child has the marker.
func marked(ctx context.Context, cl *client.Client) bool {
	sbs, err := cl.List(ctx)
	if err != nil {
		return false
	}
	for _, sb := range sbs {
		if sb.Labels["dsec.build"] != "crash" {
			continue
		}
		r, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"test", "-e", "/crash-marker"}, TimeoutMs: 5000})
		if err == nil && r.ExitCode == 0 {
			return true
		}
	}
	return false
}
