package pull_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/pull"
	"github.com/dsec-dev/dsec/internal/image/registry"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
)

// The crash tests run a pull or a removal in a child process (this test
// binary, crashChild below), kill it with SIGKILL at a point in the middle,
// then start a puller on the same directories as a restarted node does.

const crashEnv = "DSEC_PULL_CRASH_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(crashEnv); mode != "" {
		os.Exit(crashChild(mode))
	}
	os.Exit(m.Run())
}

// crashChild pulls or removes DSEC_PULL_REF in DSEC_PULL_DIR and hangs
// where the mode says, after writing DSEC_PULL_DIR/at (the parent then
// kills it): "fetch" hangs in the registry's stalled blob (no file of its
// own), "convert" in the middle of the EROFS blob's write to the blob store,
// "remove" after the first blob of the removal is deleted.
func crashChild(mode string) int {
	dir, ref := os.Getenv("DSEC_PULL_DIR"), os.Getenv("DSEC_PULL_REF")
	rc := registry.Config{DockerConfig: filepath.Join(dir, "config.json"), Insecure: []string{os.Getenv("DSEC_PULL_HOST")}, Retries: 1, MinBackoff: 1e6}
	c, err := registry.New(rc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	spec := "dir:" + filepath.Join(dir, "blobs")
	bs, err := blob.Open(spec, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	hang := func() {
		_ = os.WriteFile(filepath.Join(dir, "at"), []byte(mode), 0o600)
		select {}
	}
	p := &pull.Puller{Registry: c, Blobs: bs, Spec: spec, Dir: filepath.Join(dir, "pull")}
	ctx := context.Background()
	switch mode {
	case "fetch":
		_, err = p.Pull(ctx, ref)
	case "convert":
		p.Blobs = hangingPut{Store: bs, hang: hang}
		_, err = p.Pull(ctx, ref)
	case "remove":
		pull.SetHook(p, func(point string) {
			if point == "remove:blobs" {
				hang()
			}
		})
		_, err = p.Remove(ctx, ref)
	}
	fmt.Fprintln(os.Stderr, "the child was not killed:", err)
	return 3
}

// hangingPut writes half of a blob of more than 64 KiB into the store, then
// hangs.
type hangingPut struct {
	blob.Store
	hang func()
}

func (h hangingPut) Put(ctx context.Context, dg string, r io.Reader, size int64) error {
	if size >= 0 && size < 64<<10 {
		return h.Store.Put(ctx, dg, r, size)
	}
	return h.Store.Put(ctx, dg, &hangAfter{r: r, left: 32 << 10, hang: h.hang}, size)
}

type hangAfter struct {
	r    io.Reader
	left int
	hang func()
}

func (h *hangAfter) Read(b []byte) (int, error) {
	if h.left <= 0 {
		h.hang()
	}
	n, err := h.r.Read(b[:min(len(b), h.left)])
	h.left -= n
	return n, err
}

// runChild starts the child in mode and waits until ready says it is in
// the middle, then kills it with SIGKILL.
func runChild(t *testing.T, e *env, dir, mode, ref string, ready func() bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+mode, "DSEC_PULL_DIR="+dir, "DSEC_PULL_REF="+ref, "DSEC_PULL_HOST="+e.reg.Host)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(60 * time.Second)
	for !ready() {
		select {
		case err := <-exited:
			t.Fatalf("%s: the child ended before the kill point: %v", mode, err)
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("%s: the child never reached the kill point", mode)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := <-exited; !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("%s: the child ended with %v, want killed", mode, err)
	}
}

// sizeOf returns the size of the largest file matching pattern (-1: none).
func sizeOf(pattern string) int64 {
	ms, _ := filepath.Glob(pattern)
	n := int64(-1)
	for _, m := range ms {
		if fi, err := os.Stat(m); err == nil {
			n = max(n, fi.Size())
		}
	}
	return n
}

func TestKill9MidPullOrRemovalThenRestart(t *testing.T) {
	e := newEnv(t, nil)
	dir := filepath.Dir(e.config) // newEnv's directory: config.json, blobs/, pull/
	ctx := context.Background()
	small := registrytest.Layer(t, E{Name: "small", Body: "small"})
	big := registrytest.Layer(t, E{Name: "big", Body: randomBody(1 << 20)})
	ref := e.reg.Host + "/crash/app:1"
	e.reg.Push(t, "crash/app:1", registrytest.Image(t, v1.Config{}, small, big))
	bigSize, _ := big.Size()

	restart := func(what string) {
		t.Helper()
		if err := e.p.Clean(ctx); err != nil {
			t.Fatalf("clean after %s: %v", what, err)
		}
		consistent(t, e)
	}

	t.Run("fetch", func(t *testing.T) {
		// The registry sends 64 KiB of the big layer, then nothing.
		e.reg.Stall(64 << 10)
		// The layer is converted as it arrives: in the middle, the big
		// blob is requested (and stalled) and its partial EROFS layer exists
		// (its data spooled to an unlinked file the kill frees).
		bigDg, _ := big.Digest()
		partial := filepath.Join(dir, "pull", "tmp", "dsec-layer-*.erofs")
		runChild(t, e, dir, "fetch", ref, func() bool {
			return e.reg.BlobGets()[bigDg.String()] > 0 && sizeOf(partial) >= 0
		})
		e.reg.Stall(0)
		if n := sizeOf(partial); n < 0 || n >= bigSize {
			t.Fatalf("the killed fetch left %d of %d bytes: not in the middle", n, bigSize)
		}
		restart("a killed fetch")
		if imgs, _ := e.p.Cached(); len(imgs) != 0 {
			t.Fatalf("an image recorded from a killed fetch: %v", imgs)
		}
	})

	t.Run("convert", func(t *testing.T) {
		blobTmp := filepath.Join(dir, "blobs", "sha256", ".tmp-*")
		runChild(t, e, dir, "convert", ref, func() bool {
			_, err := os.Stat(filepath.Join(dir, "at"))
			return err == nil && sizeOf(blobTmp) > 0
		})
		os.Remove(filepath.Join(dir, "at"))
		if sizeOf(blobTmp) <= 0 {
			t.Fatal("no half-written blob in the store: the kill was not in the middle of the write")
		}
		restart("a killed conversion")
		if imgs, _ := e.p.Cached(); len(imgs) != 0 {
			t.Fatalf("an image recorded from a killed conversion: %v", imgs)
		}
	})

	t.Run("remove", func(t *testing.T) {
		pulled, err := e.p.Pull(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		runChild(t, e, dir, "remove", ref, func() bool {
			_, err := os.Stat(filepath.Join(dir, "at"))
			return err == nil
		})
		os.Remove(filepath.Join(dir, "at"))
		// In the middle: the image record is gone, a layer record names a
		// deleted blob.
		if _, err := os.Stat(filepath.Join(dir, "pull", "images", pulled.Digest[len("sha256:"):]+".json")); !os.IsNotExist(err) {
			t.Fatalf("the image record survived the first blob's deletion: %v", err)
		}
		restart("a killed removal")
		if has := blobsOf(t, e); len(has) != 0 {
			t.Fatalf("blobs of the removed image left: %v", has)
		}
		if recs, _ := filepath.Glob(filepath.Join(dir, "pull", "layers", "*.json")); len(recs) != 0 {
			t.Fatalf("layer records left: %v", recs)
		}
	})

	// After all three, the image pulls and reads as it should.
	got, err := e.p.Pull(ctx, ref)
	if err != nil {
		t.Fatalf("pull after the crashes: %v", err)
	}
	l := open(t, e.blobs, got.Image.Layers[1].Digest)
	if fi, err := fs.Stat(l, "big"); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("big after the crashes: %v %v", fi, err)
	}
	consistent(t, e)
}
