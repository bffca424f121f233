package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/localtar"
	"github.com/dsec-dev/dsec/pkg/api"
)

// PullOptions configure `dsec bench pull`.
type PullOptions struct {
	// Options: Image is the directory image whose root file system is the
	// pushed image's base layer (default busybox); N warm creates; Parallel
	// concurrent creates of a never-seen image (default 20), and the workers
	// of the burst (default 8).
	Options
	ImagesDir string
	// Layers generated layers of LayerBytes each go on top of the base
	// (default 4 of 16 MiB). ImageBytes, when set, is their total instead:
	// LayerBytes is ImageBytes/Layers (Layers default: one per 256 MiB, at
	// least 4).
	Layers     int
	LayerBytes int64
	ImageBytes int64
	// Rounds cold creates, each on a fresh node with an empty blob store
	// (default 3), interleaved with each peer's.
	Rounds int
	// Compare names the peers timed against dsec's cold create on the same
	// image from the same registry ("podman"); PodmanDriver is podman's
	// storage driver ("": overlay where it works, else vfs).
	Compare      []string
	PodmanDriver string
	// Burst, when above 0, runs the burst instead: Burst sandboxes over
	// BurstImages images (default 8) of BurstImageBytes each (default
	// 200 MiB; half a base layer they share, half their own), each sandbox
	// answering one exec that reads a few files of both layers.
	Burst           int
	BurstImages     int
	BurstImageBytes int64
}

// PullPeer is one peer's side of the cold comparison.
type PullPeer struct {
	Cold          Latencies `json:"cold"`
	StorageDriver string    `json:"storage_driver,omitempty"`
	StorageNote   string    `json:"storage_driver_note,omitempty"`
	Work          string    `json:"work"`
	Failures      int       `json:"failures"`
	FirstError    string    `json:"first_error,omitempty"`
}

// PullResult is the outcome of `dsec bench pull`.
type PullResult struct {
	Ref string `json:"ref,omitempty"`
	// Layers, ContentBytes (the uncompressed layers' files) and
	// CompressedBytes describe the pushed image.
	Layers          int   `json:"layers,omitempty"`
	ContentBytes    int64 `json:"content_bytes,omitempty"`
	CompressedBytes int64 `json:"compressed_bytes,omitempty"`
	// Cold is create → first exec answered on a node with an empty blob
	// store (the pull included); Warm the same on that node once the layers
	// are there; Stored the same on a fresh node that never saw the image
	// whose blob store (shared with the cold node) holds its layers.
	Cold   Latencies `json:"cold"`
	Warm   Latencies `json:"warm"`
	Stored Latencies `json:"stored"`
	// Concurrent is Parallel creates at once of the image on a fresh node,
	// each to its first exec answered.
	Concurrent Latencies `json:"concurrent"`
	Parallel   int       `json:"parallel,omitempty"`
	// FetchesPerLayer counts the registry's GETs of each layer blob during
	// the concurrent creates; MaxFetchesPerLayer is the largest (1: each
	// layer fetched once).
	FetchesPerLayer    map[string]int `json:"fetches_per_layer,omitempty"`
	MaxFetchesPerLayer int            `json:"max_fetches_per_layer,omitempty"`
	// Peers are the compared peers' cold runs; Skipped those that could not
	// run here, and why; RatiosP50 "dsec-cold/PEER" and "dsec-stored/PEER"
	// of the p50s (below 1: dsec faster).
	Peers     map[string]*PullPeer `json:"peers,omitempty"`
	Skipped   map[string]string    `json:"skipped,omitempty"`
	RatiosP50 map[string]float64   `json:"ratios_p50,omitempty"`
	// Burst is the burst's outcome (PullOptions.Burst).
	Burst      *BurstPullResult `json:"burst,omitempty"`
	Failures   int              `json:"failures"`
	FirstError string           `json:"first_error,omitempty"`
}

// pullPeers are the peers `bench pull --compare` knows.
var pullPeers = []string{"podman"}

// normalize applies the defaults and checks the options.
func (o *PullOptions) normalize() error {
	if o.Image == "" {
		o.Image = "busybox"
	}
	parallel := o.Parallel
	o.defaults()
	if o.Parallel <= 1 {
		o.Parallel = 20
	}
	if o.N == 100 {
		o.N = 10
	}
	switch {
	case o.Layers < 0:
		o.Layers = 0
	case o.Layers == 0 && o.ImageBytes > 0:
		o.Layers = max(4, int((o.ImageBytes+(256<<20)-1)/(256<<20)))
	case o.Layers == 0:
		o.Layers = 4
	}
	if o.ImageBytes < 0 || o.LayerBytes < 0 || o.BurstImageBytes < 0 || o.Burst < 0 || o.BurstImages < 0 {
		return errdefs.Invalid("bench pull: sizes and counts must not be negative")
	}
	if o.ImageBytes > 0 {
		if o.Layers == 0 {
			return errdefs.Invalid("bench pull: --image-size needs layers (--layers above 0)")
		}
		o.LayerBytes = o.ImageBytes / int64(o.Layers)
	}
	if o.LayerBytes <= 0 {
		o.LayerBytes = 16 << 20
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	for _, p := range o.Compare {
		if !slices.Contains(pullPeers, p) {
			return errdefs.Invalid("bench pull: unknown peer %q (known: %s)", p, strings.Join(pullPeers, ", "))
		}
	}
	if o.PodmanDriver != "" && o.PodmanDriver != "overlay" && o.PodmanDriver != "vfs" {
		return errdefs.Invalid("bench pull: podman storage driver %q: want overlay or vfs", o.PodmanDriver)
	}
	if o.Burst > 0 {
		if o.BurstImages == 0 {
			o.BurstImages = 8
		}
		if o.BurstImageBytes == 0 {
			o.BurstImageBytes = 200 << 20
		}
		o.Parallel = 8
		if parallel > 0 {
			o.Parallel = parallel
		}
	}
	if o.ImagesDir == "" {
		o.ImagesDir = os.Getenv("DSEC_IMAGES_DIR")
	}
	if o.ImagesDir == "" {
		o.ImagesDir = daemon.DefaultImagesDir
	}
	return nil
}

// countingRegistry is go-containerregistry's registry on loopback, counting
// the blob GETs it serves.
type countingRegistry struct {
	host string
	srv  *http.Server
	dir  string
	mu   sync.Mutex
	gets map[string]int
}

// startRegistry starts the registry, its blobs in a new directory (large
// images would not fit in memory).
func startRegistry() (*countingRegistry, error) {
	dir, err := os.MkdirTemp("", "dsec-bench-registry-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &countingRegistry{host: ln.Addr().String(), dir: dir, gets: map[string]int{}}
	inner := ggcr.New(ggcr.Logger(discardLog()), ggcr.WithBlobHandler(ggcr.NewDiskBlobHandler(dir)))
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

func (r *countingRegistry) close() {
	_ = r.srv.Close()
	_ = os.RemoveAll(r.dir)
}

// push pushes an image of layers (PATH set as Docker's default) as
// reg.host/repo:latest and returns its reference.
func (r *countingRegistry) push(ctx context.Context, repo string, layers []v1.Layer) (string, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Architecture, cfg.OS = goArch(), "linux"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	s := r.host + "/" + repo + ":latest"
	ref, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", s, err)
	}
	return s, nil
}

func (r *countingRegistry) reset() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.gets
	r.gets = map[string]int{}
	return out
}

// dirLayer is a gzip layer of directory dir's tree, and the size of its
// tar.
func dirLayer(dir string) (v1.Layer, int64, error) {
	var buf bytes.Buffer
	if err := localtar.Write(dir, &buf); err != nil {
		return nil, 0, err
	}
	l, err := tarLayer(buf.Bytes())
	return l, int64(buf.Len()), err
}

func tarLayer(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed))
}

// Pull runs `dsec bench pull`: it pushes an image (the base directory
// image's tree plus generated layers) to a registry on loopback, then times
// creates of it by reference on nodes of its own, and each peer's run of it
// from the same registry (Compare); with Burst, the burst instead
// (BurstPull).
func Pull(ctx context.Context, o PullOptions) (PullResult, error) {
	var res PullResult
	if err := o.normalize(); err != nil {
		return res, err
	}
	reg, err := startRegistry()
	if err != nil {
		return res, err
	}
	defer reg.close()
	base, baseBytes, err := dirLayer(filepath.Join(o.ImagesDir, o.Image, "rootfs"))
	if err != nil {
		return res, fmt.Errorf("base layer from image %s: %w", o.Image, err)
	}
	if o.Burst > 0 {
		b, err := burstPull(ctx, o, reg, base)
		res.Burst = &b
		if err != nil {
			res.Failures, res.FirstError = 1, err.Error()
		}
		return res, err
	}
	res.Parallel = o.Parallel
	layers := []v1.Layer{base}
	res.ContentBytes = baseBytes
	for i := range o.Layers {
		l, err := genLayer(uint64(i+1), fmt.Sprintf("bench/layer%d", i), o.LayerBytes)
		if err != nil {
			return res, err
		}
		layers = append(layers, l)
		res.ContentBytes += o.LayerBytes
	}
	o.Logger.Info("pushing the image", "layers", len(layers), "content_bytes", res.ContentBytes)
	if res.Ref, err = reg.push(ctx, "bench/pull", layers); err != nil {
		return res, err
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

	peers, skipped := pullPeerSides(o, res.Ref)
	if len(skipped) > 0 {
		res.Skipped = skipped
	}
	var cold, warm, stored []time.Duration
	// dsecRound is one cold round of dsec: a fresh node whose blob store is
	// a directory of its own; then a second fresh node sharing that store
	// (the layers in it, the image never seen by that node).
	dsecRound := func(round int) error {
		storeDir, err := os.MkdirTemp("/var/lib/dsec", "bench-blobs-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(storeDir)
		claims := newMemClaims()
		shared := func(c *daemon.Config) { c.BlobStore, c.LayerClaims = "dir:"+storeDir, claims }
		d, done, err := openNode(ctx, o.Options, insecure, shared)
		if err != nil {
			return err
		}
		defer done()
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
		d2, done2, err := openNode(ctx, o.Options, insecure, shared)
		if err != nil {
			return err
		}
		defer done2()
		if t, err := createExec(ctx, d2); err != nil {
			fail(fmt.Errorf("create on a node sharing the blob store %d: %w", round, err))
		} else {
			stored = append(stored, t)
		}
		return nil
	}
	peerLat := map[string][]time.Duration{}
	for round := range o.Rounds {
		// Interleaved: each round starts one side later.
		n := len(peers) + 1
		for k := range n {
			if i := (round + k) % n; i == 0 {
				if err := dsecRound(round); err != nil {
					return res, err
				}
			} else {
				p := peers[i-1]
				if t, err := p.cold(ctx); err != nil {
					p.res.Failures++
					if p.res.FirstError == "" {
						p.res.FirstError = err.Error()
					}
				} else {
					peerLat[p.name] = append(peerLat[p.name], t)
				}
			}
		}
		o.Logger.Info("cold round done", "round", round+1, "of", o.Rounds)
	}
	res.Cold, res.Warm, res.Stored = summarize(cold), summarize(warm), summarize(stored)
	if len(peers) > 0 {
		res.Peers, res.RatiosP50 = map[string]*PullPeer{}, map[string]float64{}
	}
	for _, p := range peers {
		p.res.Cold = summarize(peerLat[p.name])
		p.res.StorageDriver, p.res.StorageNote = p.driver()
		res.Peers[p.name] = p.res
		if p.res.Cold.P50ms > 0 {
			res.RatiosP50["dsec-cold/"+p.name] = round(res.Cold.P50ms/p.res.Cold.P50ms, 3)
			res.RatiosP50["dsec-stored/"+p.name] = round(res.Stored.P50ms/p.res.Cold.P50ms, 3)
		}
	}

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
