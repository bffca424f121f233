package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sync/errgroup"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/localtar"
	"github.com/dsec-dev/dsec/pkg/api"
)

// PullOptions configure `dsec bench pull`.
type PullOptions struct {
	// Options: Image is the directory image whose root file system is the
	// pushed image's base layer (default busybox); N warm creates; Parallel
	// concurrent creates of a never-seen image (default 20).
	Options
	ImagesDir string
	// Layers random-content layers of LayerBytes each go on top of the base
	// (default 4 of 16 MiB).
	Layers     int
	LayerBytes int64
	// Rounds cold creates, each on a fresh node with an empty blob store
	// (default 3).
	Rounds int
}

// PullResult is the outcome of `dsec bench pull`.
type PullResult struct {
	Ref string `json:"ref"`
	// Layers and CompressedBytes describe the pushed image.
	Layers          int   `json:"layers"`
	CompressedBytes int64 `json:"compressed_bytes"`
	// Cold is create → first exec answered on a node with an empty blob
	// store (the pull included); Warm the same on that node once the layers
	// are there.
	Cold Latencies `json:"cold"`
	Warm Latencies `json:"warm"`
	// Concurrent is Parallel creates at once of the image on a fresh node,
	// each to its first exec answered.
	Concurrent Latencies `json:"concurrent"`
	Parallel   int       `json:"parallel"`
	// FetchesPerLayer counts the registry's GETs of each layer blob during
	// the concurrent creates; MaxFetchesPerLayer is the largest (1: each
	// layer fetched once).
	FetchesPerLayer    map[string]int `json:"fetches_per_layer"`
	MaxFetchesPerLayer int            `json:"max_fetches_per_layer"`
	Failures           int            `json:"failures"`
	FirstError         string         `json:"first_error,omitempty"`
}

// countingRegistry is go-containerregistry's registry on loopback, counting
// the blob GETs it serves.
type countingRegistry struct {
	host string
	srv  *http.Server
	mu   sync.Mutex
	gets map[string]int
}

func startRegistry() (*countingRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &countingRegistry{host: ln.Addr().String(), gets: map[string]int{}}
	inner := ggcr.New(ggcr.Logger(discardLog()))
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if i := strings.Index(req.URL.Path, "/blobs/sha256:"); i >= 0 && req.Method == http.MethodGet {
			r.mu.Lock()
			r.gets[req.URL.Path[i+len("/blobs/"):]]++
			r.mu.Unlock()
		}
		inner.ServeHTTP(w, req)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *countingRegistry) reset() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.gets
	r.gets = map[string]int{}
	return out
}

// dirLayer is a gzip layer of directory dir's tree.
func dirLayer(dir string) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := localtar.Write(dir, &buf); err != nil {
		return nil, err
	}
	return tarLayer(buf.Bytes())
}

// randomLayer is a gzip layer holding one file of n random bytes.
func randomLayer(i int, n int64) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("bench/layer%d.bin", i), Mode: 0o644, Size: n, Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := io.CopyN(tw, rand.Reader, n); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return tarLayer(buf.Bytes())
}

func tarLayer(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed))
}

// Pull runs `dsec bench pull`: it pushes an image (the base directory
// image's tree plus random layers) to a registry on loopback, then times
// creates of it by reference on nodes of its own.
func Pull(ctx context.Context, o PullOptions) (PullResult, error) {
	var res PullResult
	if o.Image == "" {
		o.Image = "busybox"
	}
	o.defaults()
	if o.Parallel <= 1 {
		o.Parallel = 20
	}
	if o.N == 100 {
		o.N = 10
	}
	if o.Layers < 0 {
		o.Layers = 0
	} else if o.Layers == 0 {
		o.Layers = 4
	}
	if o.LayerBytes <= 0 {
		o.LayerBytes = 16 << 20
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.ImagesDir == "" {
		o.ImagesDir = os.Getenv("DSEC_IMAGES_DIR")
	}
	if o.ImagesDir == "" {
		o.ImagesDir = daemon.DefaultImagesDir
	}
	res.Parallel = o.Parallel

	reg, err := startRegistry()
	if err != nil {
		return res, err
	}
	defer reg.srv.Close()
	base, err := dirLayer(filepath.Join(o.ImagesDir, o.Image, "rootfs"))
	if err != nil {
		return res, fmt.Errorf("base layer from image %s: %w", o.Image, err)
	}
	layers := []v1.Layer{base}
	for i := range o.Layers {
		l, err := randomLayer(i, o.LayerBytes)
		if err != nil {
			return res, err
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return res, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return res, err
	}
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Architecture, cfg.OS = goArch(), "linux"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return res, err
	}
	res.Ref = reg.host + "/bench/pull:latest"
	ref, err := name.ParseReference(res.Ref, name.Insecure)
	if err != nil {
		return res, err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return res, fmt.Errorf("push %s: %w", res.Ref, err)
	}
	layerDigests := map[string]bool{}
	for _, l := range layers {
		dg, _ := l.Digest()
		sz, _ := l.Size()
		layerDigests[dg.String()] = true
		res.CompressedBytes += sz
	}
	res.Layers = len(layers)
	insecure := func(c *daemon.Config) { c.Registries.Insecure = []string{reg.host} }
	var errs []error
	fail := func(err error) {
		res.Failures++
		if res.FirstError == "" {
			res.FirstError = err.Error()
		}
		errs = append(errs, err)
	}

	// createExec creates a sandbox of the image and waits for an exec.
	createExec := func(ctx context.Context, d *daemon.Daemon) (time.Duration, error) {
		t0 := time.Now()
		sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Backend: "container", Image: res.Ref})
		if err != nil {
			return 0, err
		}
		defer d.Manager.Delete(context.WithoutCancel(ctx), sb.ID)
		r, err := d.Manager.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}, TimeoutMs: 60000})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exec true: exit %d: %s", r.ExitCode, r.Stderr)
		}
		return time.Since(t0), err
	}

	var cold, warm []time.Duration
	for round := range o.Rounds {
		d, done, err := openNode(ctx, o.Options, insecure)
		if err != nil {
			return res, err
		}
		if t, err := createExec(ctx, d); err != nil {
			fail(fmt.Errorf("cold create %d: %w", round, err))
		} else {
			cold = append(cold, t)
		}
		if round == 0 {
			for i := range o.N {
				if t, err := createExec(ctx, d); err != nil {
					fail(fmt.Errorf("warm create %d: %w", i, err))
				} else {
					warm = append(warm, t)
				}
			}
		}
		done()
	}
	res.Cold, res.Warm = summarize(cold), summarize(warm)

	d, done, err := openNode(ctx, o.Options, insecure)
	if err != nil {
		return res, err
	}
	defer done()
	reg.reset()
	var mu sync.Mutex
	var conc []time.Duration
	g, gctx := errgroup.WithContext(ctx)
	for i := range o.Parallel {
		g.Go(func() error {
			t, err := createExec(gctx, d)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fail(fmt.Errorf("concurrent create %d: %w", i, err))
				return nil
			}
			conc = append(conc, t)
			return nil
		})
	}
	_ = g.Wait()
	res.Concurrent = summarize(conc)
	res.FetchesPerLayer = map[string]int{}
	gets := reg.reset()
	for dg := range layerDigests {
		res.FetchesPerLayer[dg] = gets[dg]
		res.MaxFetchesPerLayer = max(res.MaxFetchesPerLayer, gets[dg])
	}
	return res, errors.Join(errs...)
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

func goArch() string { return runtime.GOARCH }
