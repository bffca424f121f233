package node

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestMain(m *testing.M) {
	lazy.MaybeMain() // the nodes these tests open start this binary as layerd
	os.Exit(m.Run())
}

// layeredImages writes an images dir with one layered image, "layered": the
// busybox image plus /data/f0..f3 (2 MiB of random bytes each) as one EROFS layer
// in a blob store whose every read waits 20 ms. It returns the dir and the files'
// sha256sum lines.
func layeredImages(t *testing.T) (string, string) {
	t.Helper()
	bb, err := (&image.Store{Dir: DefaultImagesDir}).Resolve("busybox")
	if err != nil || len(bb.Lower()) != 1 {
		t.Skipf("needs the busybox image in %s (make setup): %v", DefaultImagesDir, err)
	}
	src := t.TempDir()
	if out, err := exec.Command("cp", "-a", bb.Lower()[0]+"/.", src).CombinedOutput(); err != nil {
		t.Fatalf("copy busybox: %v %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(src, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sums strings.Builder
	for i := 0; i < 4; i++ {
		b := make([]byte, 2<<20)
		_, _ = rand.Read(b)
		name := fmt.Sprintf("/data/f%d", i)
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	blobDir := t.TempDir()
	bs, err := blob.NewDir(blobDir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layer.Build(context.Background(), layer.Source{Kind: "dir", Arg: src}, bs, layer.Options{TempDir: t.TempDir(), IndexChunk: blob.DefaultIndexChunk})
	if err != nil {
		t.Fatal(err)
	}
	imagesDir := t.TempDir()
	m := image.Manifest{Name: "layered", BlobStore: "dir:" + blobDir + ";latency=20ms",
		Layers: []image.Layer{{Role: image.RoleBase, Digest: l.Digest, Size: l.Size, Index: l.Index}}}
	if err := os.MkdirAll(filepath.Join(imagesDir, m.Name), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := image.WriteManifest(filepath.Join(imagesDir, m.Name, image.ManifestFile), m); err != nil {
		t.Fatal(err)
	}
	return imagesDir, sums.String()
}

func openNode(t *testing.T, dataDir, imagesDir string) *Daemon {
	t.Helper()
	d, err := New(context.Background(), Config{DataDir: dataDir, ImagesDir: imagesDir, DefaultImage: "layered", Token: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func fuseOrErofsUnder(root string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], root) {
			out = append(out, f[4])
		}
	}
	return out
}

// TestLayerdSupervision runs a sandbox on a lazily loaded layer and has it hash
// files of the layer while layerd is killed with SIGKILL twice: the holder starts
// layerd again and the sandbox's reads complete with the right bytes. Stopping the
// server with the sandbox left keeps layerd serving it; a server that starts
// again on the same data dir re-adopts the sandbox, and once it is deleted,
// stopping the server stops layerd and its holder and leaves nothing mounted.
func TestLayerdSupervision(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	imagesDir, sums := layeredImages(t)
	dataDir := t.TempDir()
	ctx := context.Background()
	d := openNode(t, dataDir, imagesDir)
	root := d.Layers.Root()
	sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: "layered"})
	if err != nil {
		d.Shutdown(ctx, true)
		t.Fatal(err)
	}
	cleanup := func(d *Daemon) {
		if err := d.Shutdown(ctx, true); err != nil {
			t.Error(err)
		}
		if m := fuseOrErofsUnder(root); len(m) > 0 {
			t.Errorf("left mounted: %v", m)
			lazy.Cleanup(root)
		}
	}

	type result struct {
		res api.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := d.Manager.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sha256sum", "/data/f0", "/data/f1", "/data/f2", "/data/f3"}, TimeoutMs: 120000})
		done <- result{r, err}
	}()
	for i := 0; i < 2; i++ {
		time.Sleep(400 * time.Millisecond) // the kill point: 400 ms into the reads (each blob fetch takes 20 ms)
		pid, ok := d.Layers.Running(ctx)
		if !ok {
			t.Fatal("layerd not running")
		}
		t0 := time.Now()
		_ = syscall.Kill(pid, syscall.SIGKILL)
		testwait.For(t, 20*time.Second, "layerd restarted after its kill -9", func() bool {
			p, ok := d.Layers.Running(ctx)
			if ok && p != pid {
				t.Logf("kill -9 of layerd %d: layerd %d answers after %v", pid, p, time.Since(t0).Round(time.Millisecond))
			}
			return ok && p != pid
		})
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(150 * time.Second):
		t.Fatal("exec hung")
	}
	if r.err != nil || r.res.ExitCode != 0 || r.res.Stdout != sums {
		cleanup(d)
		t.Fatalf("sha256sum in the sandbox across the kills: %v exit %d\nstdout %q\nstderr %q\nwant %q", r.err, r.res.ExitCode, r.res.Stdout, r.res.Stderr, sums)
	}

	// Server stop with the sandbox left: layerd keeps serving it.
	pid, _ := d.Layers.Running(ctx)
	if err := d.Shutdown(ctx, false); err != nil {
		t.Fatal(err)
	}
	if !running(pid) {
		t.Fatal("layerd stopped with the server while a sandbox uses its layers")
	}
	d = openNode(t, dataDir, imagesDir)
	if r, err := d.Manager.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sha256sum", "/data/f2"}}); err != nil || !strings.Contains(sums, r.Stdout) || r.Stdout == "" {
		cleanup(d)
		t.Fatalf("exec after the server restart: %+v %v", r, err)
	}
	if err := d.Manager.Delete(ctx, sb.ID); err != nil {
		cleanup(d)
		t.Fatal(err)
	}
	holder := lazy.HolderPid(root)
	if holder == 0 {
		t.Error("no holder running for layerd")
	}
	// Server stop with no sandbox left: layerd and its holder go, nothing stays mounted.
	if err := d.Shutdown(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{pid, holder} {
		if p > 0 && running(p) {
			t.Errorf("process %d (layerd or holder) still running after the server stopped with no sandboxes", p)
		}
	}
	if m := fuseOrErofsUnder(root); len(m) > 0 {
		t.Errorf("left mounted after the server stopped with no sandboxes: %v", m)
		lazy.Cleanup(root)
	}
}

// running reports whether pid is alive and not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}
