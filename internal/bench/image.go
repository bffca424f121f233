package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/layer"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ImageOptions configure `dsec bench image`.
type ImageOptions struct {
	// Options: Image is the directory image the base layer is built from (default
	// debian); N sandboxes on Parallel workers per image kind for the create rate
	// (N < 0 skips it).
	Options
	// ImagesDir holds the source image (default $DSEC_IMAGES_DIR or
	// /var/lib/dsec/images).
	ImagesDir string
	// ChunkSize is layerd's fetch unit (default lazy.DefaultChunkSize).
	ChunkSize int64
	// Sweep adds a lazy cold run for each of these chunk sizes (same layer, each on
	// a fresh node) to the result.
	Sweep []int64
	// ReadAheadKB sets the readahead of the FUSE file (and of the loop device
	// with LoopDevice); BufferedLoop the loop device's I/O mode (lazy.Config;
	// 0/false: layerd's defaults, no loop device).
	ReadAheadKB  int
	BufferedLoop bool
	LoopDevice   bool
	// Rate throttles the blob store in bytes per second (default 100 MB/s);
	// Latency delays each read from it by a round trip (default none).
	Rate    int64
	Latency time.Duration
	// ScratchDir holds the blob store, the images dir and the nodes' data dirs
	// (default a new directory under /var/lib/dsec, removed afterwards).
	ScratchDir string
	// Task is the first command run in the fresh sandbox (its first stdout byte ends
	// the cold start); Then runs after it (default: Python, then git --version).
	Task, Then []string
	// MetaPrefetch has every node fetch the layer's metadata chunks when it
	// mounts the layer (lazy.Config).
	MetaPrefetch bool
	// MetaCompare adds this many rounds of two lazy cold runs, one with the
	// metadata prefetch and one without, in alternating order (MetaResult).
	MetaCompare int
}

// ColdRun is one node that has never seen the image: a sandbox created on the
// layered image, the task run in it.
type ColdRun struct {
	// Mode is "lazy" (on demand), "full" (whole blob fetched and verified
	// before mount), "prefetch" (lazy with a prefetch list), or, in
	// --meta-compare, "lazy-meta" / "lazy-nometa" (lazy with / without the
	// metadata chunks fetched at mount).
	Mode string `json:"mode"`
	// CreateS is the create request (layer fetch and mount included).
	CreateS float64 `json:"create_s"`
	// FirstOutputS is from the create request to the first stdout byte of the task.
	FirstOutputS float64 `json:"first_output_s"`
	// TotalS is from the create request to the end of the last command.
	TotalS       float64 `json:"total_s"`
	BytesFetched int64   `json:"bytes_fetched"`
	Fetches      int64   `json:"fetches"`
	CacheHits    int64   `json:"cache_hits"`
	CacheMisses  int64   `json:"cache_misses"`
	Verified     bool    `json:"verified"`
	LoopDirectIO bool    `json:"loop_direct_io"`
	ReadAheadKB  int     `json:"read_ahead_kb"`
	Output       string  `json:"output"`
}

// SweepRun is a lazy cold run at one chunk size.
type SweepRun struct {
	ChunkSize       int64   `json:"chunk_size"`
	BytesFetched    int64   `json:"bytes_fetched"`
	FetchedFraction float64 `json:"fetched_fraction"`
	Fetches         int64   `json:"fetches"`
	FirstOutputS    float64 `json:"first_output_s"`
}

// ImageResult is the outcome of `dsec bench image`.
type ImageResult struct {
	Image         string  `json:"image"`  // source directory image
	Source        string  `json:"source"` // what the base layer was built from
	BlobBytes     int64   `json:"blob_bytes"`
	Digest        string  `json:"digest"`
	LayerBuildS   float64 `json:"layer_build_s"`
	ChunkSize     int64   `json:"chunk_size"`
	RateBytesPerS int64   `json:"rate_bytes_per_s"`
	LatencyMs     float64 `json:"latency_ms"`
	Task          string  `json:"task"`

	Lazy ColdRun `json:"lazy"`
	Full ColdRun `json:"full"`
	// Prefetch is a third never-seen node, on demand plus the access list the lazy
	// run recorded as the layer's prefetch list (`dsec image record`).
	Prefetch ColdRun `json:"prefetch"`
	// PrefetchFirstOutputS and its speedups, as for the lazy run.
	PrefetchFirstOutputS      float64 `json:"prefetch_first_output_s"`
	PrefetchSpeedup           float64 `json:"prefetch_speedup"`
	PrefetchSpeedupVsFloor    float64 `json:"prefetch_speedup_vs_floor"`
	PrefetchedFetchedFraction float64 `json:"prefetch_fetched_fraction"`
	access                    lazy.AccessList
	metaAccess                lazy.AccessList // a lazy run's without the metadata prefetch
	// FetchedFraction is the lazy run's bytes fetched over the blob's size.
	FetchedFraction  float64 `json:"fetched_fraction"`
	BytesFetched     int64   `json:"bytes_fetched"`
	LazyFirstOutputS float64 `json:"lazy_first_output_s"`
	FullFirstOutputS float64 `json:"full_first_output_s"`
	// Speedup is full over lazy time to first output.
	Speedup float64 `json:"speedup"`
	// FullTransferFloorS is the blob's size over the link rate: what fetching the
	// whole blob costs at the least, before cache writes and verification;
	// SpeedupVsFloor is it over the lazy time to first output.
	FullTransferFloorS float64 `json:"full_transfer_floor_s"`
	SpeedupVsFloor     float64 `json:"speedup_vs_floor"`
	// ChunkSweep has one lazy cold run per --chunk-sweep size.
	ChunkSweep []SweepRun `json:"chunk_sweep,omitempty"`
	// Meta is where a cold start's reads go (metadata or file data) and the
	// --meta-compare runs.
	Meta MetaResult `json:"meta"`

	// Create rates on the lazy node once the layer is mounted, layered image vs
	// the directory image, N each on Parallel workers, interleaved.
	CreateN            int     `json:"create_n,omitempty"`
	CreateParallel     int     `json:"create_parallel,omitempty"`
	DirCreatesPerS     float64 `json:"dir_creates_per_s,omitempty"`
	LayeredCreatesPerS float64 `json:"layered_creates_per_s,omitempty"`
	DirCreateP50ms     float64 `json:"dir_create_p50_ms,omitempty"`
	LayeredCreateP50ms float64 `json:"layered_create_p50_ms,omitempty"`
	// CreateRatio is layered over directory creates per second.
	CreateRatio float64 `json:"create_ratio,omitempty"`
	Failures    int     `json:"failures"`
	FirstError  string  `json:"first_error,omitempty"`

	Targets ImageTargets `json:"targets"`
}

// MetaResult is the layer's metadata chunks (the chunk index's Meta) against a
// cold start's reads, and, with --meta-compare, lazy cold runs with and without
// fetching the metadata chunks at mount.
type MetaResult struct {
	Chunks int   `json:"chunks"` // metadata chunks of the layer
	Bytes  int64 `json:"bytes"`
	// Fraction is Bytes over the blob's size.
	Fraction float64 `json:"fraction"`
	// ColdReads is how many chunks the cold start read (the access list of a
	// lazy run without the metadata prefetch), ColdReadsMeta how many of them
	// are metadata chunks, FirstHalfMeta how many of the first half.
	ColdReads     int `json:"cold_reads"`
	ColdReadsMeta int `json:"cold_reads_meta"`
	FirstHalfMeta int `json:"first_half_meta"`
	// Rounds of the comparison; On and Off the runs with and without the
	// metadata prefetch, in run order.
	Rounds int       `json:"rounds,omitempty"`
	On     []ColdRun `json:"on,omitempty"`
	Off    []ColdRun `json:"off,omitempty"`
	// Medians of create → first output and of bytes fetched; Speedup is Off
	// over On first output (above 1: the prefetch helps).
	OnFirstOutputS  float64 `json:"on_first_output_s,omitempty"`
	OffFirstOutputS float64 `json:"off_first_output_s,omitempty"`
	OnCreateS       float64 `json:"on_create_s,omitempty"`
	OffCreateS      float64 `json:"off_create_s,omitempty"`
	OnBytes         int64   `json:"on_bytes_fetched,omitempty"`
	OffBytes        int64   `json:"off_bytes_fetched,omitempty"`
	Speedup         float64 `json:"speedup,omitempty"`
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// metaCompare runs o.MetaCompare rounds of lazy cold runs with and without the
// metadata prefetch (order alternating: on off, off on, ...) and classifies the
// first run without it's reads against the layer's metadata chunks meta.
func metaCompare(ctx context.Context, o ImageOptions, scratch, imagesDir string, meta []int64, res *ImageResult) error {
	so := o
	so.N = -1
	m := &res.Meta
	m.Rounds = o.MetaCompare
	for i := 0; i < o.MetaCompare; i++ {
		modes := []string{"lazy-meta", "lazy-nometa"}
		if i%2 == 1 {
			modes[0], modes[1] = modes[1], modes[0]
		}
		for _, mode := range modes {
			run, err := coldRun(ctx, so, scratch, imagesDir, mode, o.ChunkSize, res)
			if err != nil {
				return fmt.Errorf("%s run: %w", mode, err)
			}
			if mode == "lazy-meta" {
				m.On = append(m.On, run)
			} else {
				m.Off = append(m.Off, run)
			}
		}
	}
	stat := func(runs []ColdRun) (first, create float64, bytes int64) {
		var f, c, b []float64
		for _, r := range runs {
			f, c, b = append(f, r.FirstOutputS), append(c, r.CreateS), append(b, float64(r.BytesFetched))
		}
		return median(f), median(c), int64(median(b))
	}
	m.OnFirstOutputS, m.OnCreateS, m.OnBytes = stat(m.On)
	m.OffFirstOutputS, m.OffCreateS, m.OffBytes = stat(m.Off)
	if m.OnFirstOutputS > 0 {
		m.Speedup = round(m.OffFirstOutputS/m.OnFirstOutputS, 2)
	}
	return nil
}

// classifyReads counts the metadata chunks among the chunks al read.
func (m *MetaResult) classifyReads(al lazy.AccessList, meta []int64) {
	m.ColdReads, m.ColdReadsMeta, m.FirstHalfMeta = len(al.Chunks), 0, 0
	for i, c := range al.Chunks {
		if _, ok := slices.BinarySearch(meta, c); ok {
			m.ColdReadsMeta++
			if i < (len(al.Chunks)+1)/2 {
				m.FirstHalfMeta++
			}
		}
	}
}

// ImageTargets are issue 3's targets, checked on the result.
type ImageTargets struct {
	FetchedUnder10pct bool `json:"fetched_fraction_le_0_10"`
	Speedup5x         bool `json:"speedup_ge_5"`
	CreateWithin10pct bool `json:"create_ratio_ge_0_90"`
}

// finish derives the summary fields from the two cold runs and the create rates.
func (r *ImageResult) finish() {
	r.BytesFetched = r.Lazy.BytesFetched
	r.FetchedFraction = fraction(r.Lazy.BytesFetched, r.BlobBytes)
	r.LazyFirstOutputS, r.FullFirstOutputS = r.Lazy.FirstOutputS, r.Full.FirstOutputS
	if r.Lazy.FirstOutputS > 0 {
		r.Speedup = round(r.Full.FirstOutputS/r.Lazy.FirstOutputS, 2)
	}
	if r.RateBytesPerS > 0 {
		r.FullTransferFloorS = round(float64(r.BlobBytes)/float64(r.RateBytesPerS), 3)
		if r.Lazy.FirstOutputS > 0 {
			r.SpeedupVsFloor = round(r.FullTransferFloorS/r.Lazy.FirstOutputS, 2)
		}
	}
	if p := r.Prefetch.FirstOutputS; p > 0 {
		r.PrefetchFirstOutputS = p
		r.PrefetchSpeedup = round(r.Full.FirstOutputS/p, 2)
		r.PrefetchSpeedupVsFloor = round(r.FullTransferFloorS/p, 2)
		r.PrefetchedFetchedFraction = fraction(r.Prefetch.BytesFetched, r.BlobBytes)
	}
	if r.DirCreatesPerS > 0 {
		r.CreateRatio = round(r.LayeredCreatesPerS/r.DirCreatesPerS, 3)
	}
	r.Targets = ImageTargets{
		FetchedUnder10pct: r.BlobBytes > 0 && r.Lazy.BytesFetched > 0 && r.FetchedFraction <= 0.10,
		Speedup5x:         r.Speedup >= 5,
		CreateWithin10pct: r.CreateRatio >= 0.90,
	}
}

const (
	benchDirImage     = "dir"
	benchLayeredImage = "layered"
)

// Image measures layered images: it builds the base layer from a directory image
// into a scratch blob store throttled to o.Rate, then starts two fresh private
// nodes (empty chunk cache, nothing mounted: nodes that have never seen the image),
// one loading the layer on demand and one fetching the whole blob first, and times
// from the create request to the task's first stdout byte on each; then, on the
// lazy node with the layer mounted, it compares create rates of the layered and the
// directory image. Every node, layerd and mount it starts is gone when it returns.
func Image(ctx context.Context, o ImageOptions) (res ImageResult, err error) {
	skipCreate := o.N < 0
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	o.defaults()
	if skipCreate {
		o.N = -1
	}
	if o.Image == "" {
		o.Image = daemon.DefaultImage
	}
	if o.ImagesDir == "" {
		o.ImagesDir = os.Getenv("DSEC_IMAGES_DIR")
	}
	if o.ImagesDir == "" {
		o.ImagesDir = daemon.DefaultImagesDir
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = lazy.DefaultChunkSize
	}
	if o.Rate <= 0 {
		o.Rate = 100e6
	}
	if len(o.Task) == 0 {
		o.Task = []string{"python3", "-c", "import json, subprocess; print(1)"}
		if o.Then == nil {
			o.Then = []string{"git", "--version"}
		}
	}
	res = ImageResult{Image: o.Image, ChunkSize: o.ChunkSize, RateBytesPerS: o.Rate, LatencyMs: float64(o.Latency.Microseconds()) / 1000, Task: strings.Join(o.Task, " ")}
	if len(o.Then) > 0 {
		res.Task += "; " + strings.Join(o.Then, " ")
	}

	src, err := (&image.Store{Dir: o.ImagesDir}).Resolve(o.Image)
	if err != nil {
		return res, err
	}
	if len(src.Lower()) != 1 {
		return res, fmt.Errorf("bench image: %s has %d lower directories; the bench builds one base layer from one", o.Image, len(src.Lower()))
	}
	scratch := o.ScratchDir
	if scratch == "" {
		if err := os.MkdirAll("/var/lib/dsec", 0o700); err != nil {
			return res, err
		}
		if scratch, err = os.MkdirTemp("/var/lib/dsec", "bench-image-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(scratch)
	}

	// The base layer, in a blob store reached through a throttled link.
	blobDir := filepath.Join(scratch, "blobs")
	bs, err := blob.NewDir(blobDir)
	if err != nil {
		return res, err
	}
	tmp := filepath.Join(scratch, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return res, err
	}
	l, err := layer.Build(ctx, layer.Source{Kind: "dir", Arg: src.Lower()[0]}, bs, layer.Options{TempDir: tmp, IndexChunk: o.ChunkSize})
	if err != nil {
		return res, fmt.Errorf("bench image: build layer: %w", err)
	}
	res.Source, res.Digest, res.BlobBytes = l.Source, l.Digest, l.Size
	ixb, err := blob.ReadSmall(ctx, bs, l.Index, 64<<20)
	if err != nil {
		return res, fmt.Errorf("bench image: chunk index: %w", err)
	}
	ix, err := blob.ParseChunkIndex(ixb)
	if err != nil {
		return res, fmt.Errorf("bench image: chunk index: %w", err)
	}
	res.Meta.Chunks = len(ix.Meta)
	for _, c := range ix.Meta {
		res.Meta.Bytes += min(ix.ChunkSize, ix.BlobSize-c*ix.ChunkSize)
	}
	res.Meta.Fraction = fraction(res.Meta.Bytes, res.BlobBytes)
	res.LayerBuildS = round(l.BuildTime.Seconds(), 2)

	// An images dir with the layered image and the directory image side by side.
	imagesDir := filepath.Join(scratch, "images")
	store := fmt.Sprintf("dir:%s;rate=%d", blobDir, o.Rate)
	if o.Latency > 0 {
		store += ";latency=" + o.Latency.String()
	}
	// The main runs read the layer through its chunk index (every chunk verified,
	// chunks of the index's size); the sweep runs, without it, at their own size.
	writeLayered := func(dir, index, prefetchList string) error {
		base := image.Layer{Role: image.RoleBase, Digest: l.Digest, Size: l.Size, Index: index, PrefetchList: prefetchList}
		return writeManifest(dir, image.Manifest{Name: benchLayeredImage, BlobStore: store, Layers: []image.Layer{base},
			Description: "base layer of " + o.Image + " (bench image)"})
	}
	sweepDir := filepath.Join(scratch, "images-sweep")
	if err := writeLayered(imagesDir, l.Index, ""); err != nil {
		return res, err
	}
	if err := writeLayered(sweepDir, "", ""); err != nil {
		return res, err
	}
	if err := writeManifest(imagesDir, image.Manifest{Name: benchDirImage, Layers: src.Layers, Description: o.Image + " (bench image)"}); err != nil {
		return res, err
	}

	var errs []error
	for _, mode := range []string{"full", "lazy"} {
		run, err := coldRun(ctx, o, scratch, imagesDir, mode, o.ChunkSize, &res)
		if mode == "lazy" {
			res.Lazy = run
		} else {
			res.Full = run
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s run: %w", mode, err))
			break
		}
	}
	if len(errs) == 0 && len(res.access.Chunks) > 0 {
		// The lazy node's access list becomes the layer's prefetch list.
		b, _ := json.Marshal(res.access)
		list := blob.FromBytes(b)
		prefetchDir := filepath.Join(scratch, "images-prefetch")
		err := bs.Put(ctx, list, bytes.NewReader(b), int64(len(b)))
		if err == nil {
			err = writeLayered(prefetchDir, l.Index, list)
		}
		if err == nil {
			so := o
			so.N = -1
			res.Prefetch, err = coldRun(ctx, so, scratch, prefetchDir, "prefetch", o.ChunkSize, &res)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("prefetch run: %w", err))
		}
	}
	if len(errs) == 0 && o.MetaCompare > 0 {
		if err := metaCompare(ctx, o, scratch, imagesDir, ix.Meta, &res); err != nil {
			errs = append(errs, fmt.Errorf("meta compare: %w", err))
		}
	}
	if len(errs) == 0 && len(res.metaAccess.Chunks) > 0 {
		res.Meta.classifyReads(res.metaAccess, ix.Meta)
	}
	if len(errs) == 0 {
		so := o
		so.N = -1
		for _, c := range o.Sweep {
			run, err := coldRun(ctx, so, scratch, sweepDir, "lazy", c, &res)
			if err != nil {
				errs = append(errs, fmt.Errorf("chunk %d run: %w", c, err))
				break
			}
			res.ChunkSweep = append(res.ChunkSweep, SweepRun{ChunkSize: c, BytesFetched: run.BytesFetched,
				FetchedFraction: fraction(run.BytesFetched, res.BlobBytes), Fetches: run.Fetches, FirstOutputS: run.FirstOutputS})
		}
	}
	res.finish()
	return res, errors.Join(errs...)
}

func fraction(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return round(float64(part)/float64(whole), 4)
}

func writeManifest(imagesDir string, m image.Manifest) error {
	dir := filepath.Join(imagesDir, m.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, err := image.WriteManifest(filepath.Join(dir, image.ManifestFile), m)
	return err
}

// openImageNode starts a private node on the bench's images dir with a fresh data
// dir (so a fresh layerd root and an empty chunk cache) and the given prefetch mode.
// Its cleanup deletes every sandbox, stops layerd and checks that nothing it
// mounted is left and that layerd is gone.
func openImageNode(ctx context.Context, o ImageOptions, dataDir, imagesDir, prefetch string, chunk int64) (*daemon.Daemon, func() error, error) {
	d, err := daemon.New(ctx, daemon.Config{
		DataDir: dataDir, ImagesDir: imagesDir, DefaultImage: benchLayeredImage, Logger: o.Logger, Token: "bench",
		Layers: lazy.Config{ChunkSize: chunk, ReadAheadKB: o.ReadAheadKB, BufferedLoop: o.BufferedLoop, LoopDevice: o.LoopDevice,
			MetaPrefetch: o.MetaPrefetch},
		LayerPrefetch: prefetch,
	})
	if err != nil {
		return nil, nil, err
	}
	return d, func() error {
		root := d.Layers.Root()
		pid, _ := d.Layers.Running(context.Background())
		if pid == 0 {
			pid = lazy.Pid(root)
		}
		err := d.Shutdown(context.Background(), true)
		return errors.Join(err, checkLayerdGone(root, pid))
	}, nil
}

// checkLayerdGone verifies that layerd (pid, 0 if it never ran) has exited and that
// nothing under root is mounted; leftovers are detached and reported.
func checkLayerdGone(root string, pid int) error {
	var errs []error
	if pid > 0 {
		for i := 0; i < 250 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			errs = append(errs, fmt.Errorf("layerd %d still running after stop; killing it", pid))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if m := MountsUnder(root); len(m) > 0 {
		lazy.Cleanup(root)
		errs = append(errs, fmt.Errorf("left mounted after stop (detached now): %v", m))
	}
	return errors.Join(errs...)
}

// MountsUnder lists the mount points at or below dir.
func MountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// firstByte records when the first byte is written.
type firstByte struct {
	mu    sync.Mutex
	at    time.Time
	bytes []byte
}

func (w *firstByte) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.at.IsZero() && len(p) > 0 {
		w.at = time.Now()
	}
	if len(w.bytes) < 4096 {
		w.bytes = append(w.bytes, p[:min(len(p), 4096-len(w.bytes))]...)
	}
	return len(p), nil
}

// runStreaming runs cmd in the sandbox and returns its stdout with the time of its
// first byte; a failure, a non-zero exit or no output is an error.
func runStreaming(ctx context.Context, d *daemon.Daemon, id string, cmd []string) (*firstByte, error) {
	var out, errOut firstByte
	r, err := d.Manager.ExecStream(ctx, id, api.ExecRequest{Cmd: cmd}, session.Stream{Stdout: &out, Stderr: &errOut})
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", r.ExitCode, errOut.bytes)
	}
	if err == nil && out.at.IsZero() {
		err = errors.New("no output")
	}
	if err != nil {
		return nil, fmt.Errorf("%q: %w", cmd, err)
	}
	return &out, nil
}

// coldRun starts a fresh node in mode, creates a sandbox on the layered image, runs
// the task and reads layerd's accounting; on the lazy node it then measures the
// create rates.
func coldRun(ctx context.Context, o ImageOptions, scratch, imagesDir, mode string, chunk int64, res *ImageResult) (run ColdRun, err error) {
	run.Mode = mode
	prefetch := ""
	if mode == "full" {
		prefetch = "full"
	}
	switch mode {
	case "lazy-nometa":
		o.MetaPrefetch = false
	case "lazy-meta":
		o.MetaPrefetch = true
	}
	dataDir := filepath.Join(scratch, "node-"+mode)
	d, cleanup, err := openImageNode(ctx, o, dataDir, imagesDir, prefetch, chunk)
	if err != nil {
		return run, err
	}
	defer func() {
		err = errors.Join(err, cleanup())
		_ = os.RemoveAll(dataDir)
	}()

	t0 := time.Now()
	sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: benchLayeredImage})
	if err != nil {
		return run, fmt.Errorf("create: %w", err)
	}
	run.CreateS = round(time.Since(t0).Seconds(), 4)
	out, err := runStreaming(ctx, d, sb.ID, o.Task)
	if err != nil {
		return run, err
	}
	run.FirstOutputS = round(out.at.Sub(t0).Seconds(), 4)
	run.Output = string(out.bytes)
	if len(o.Then) > 0 {
		out, err := runStreaming(ctx, d, sb.ID, o.Then)
		if err != nil {
			return run, err
		}
		run.Output += string(out.bytes)
	}
	run.TotalS = round(time.Since(t0).Seconds(), 4)
	st, err := d.Layers.Stats(ctx)
	if err != nil {
		return run, fmt.Errorf("layerd stats: %w", err)
	}
	for _, ls := range st.Layers {
		if ls.Digest == res.Digest {
			run.BytesFetched, run.Fetches, run.CacheHits, run.CacheMisses = ls.FetchedBytes, ls.Fetches, ls.CacheHits, ls.CacheMisses
			run.Verified, run.LoopDirectIO, run.ReadAheadKB = ls.Verified, ls.LoopDirectIO, ls.ReadAheadKB
		}
	}
	if mode == "lazy" {
		if res.access, err = d.Layers.Access(ctx, res.Digest); err != nil {
			return run, fmt.Errorf("access list: %w", err)
		}
	}
	if (mode == "lazy-nometa" || (mode == "lazy" && !o.MetaPrefetch)) && len(res.metaAccess.Chunks) == 0 {
		if res.metaAccess, err = d.Layers.Access(ctx, res.Digest); err != nil {
			return run, fmt.Errorf("access list: %w", err)
		}
	}
	if mode != "lazy" || o.N < 0 {
		return run, nil
	}
	// Create rates with the layer mounted (held by the first sandbox).
	res.CreateN, res.CreateParallel = o.N, o.Parallel
	// Interleaved batches (dir, layered, layered, dir, ...) so that drifting load
	// on a shared machine hits both kinds alike.
	var total [2]time.Duration
	var made [2]int
	var lats [2][]time.Duration
	const rounds = 6
	for b := 0; b < 2*rounds; b++ {
		k := (b + b/2) % 2 // 0 1 1 0 0 1 1 0 ...
		img := benchDirImage
		if k == 1 {
			img = benchLayeredImage
		}
		n := o.N*(b/2+1)/rounds - o.N*(b/2)/rounds
		var mu sync.Mutex
		var ids []string
		lat, wall, failures, first := runLoad(ctx, n, o.Parallel, false, func(_, _ int) error {
			sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: img})
			if err == nil {
				mu.Lock()
				ids = append(ids, sb.ID)
				mu.Unlock()
			}
			return err
		})
		total[k] += wall
		lats[k] = append(lats[k], lat...)
		made[k] += n - failures
		res.Failures += failures
		if first != nil && res.FirstError == "" {
			res.FirstError = first.Error()
		}
		_, _, _, _ = runLoad(ctx, len(ids), o.Parallel, false, func(_, i int) error {
			return d.Manager.Delete(ctx, ids[i])
		})
		if ctx.Err() != nil {
			return run, ctx.Err()
		}
	}
	if total[0] > 0 && total[1] > 0 {
		res.DirCreatesPerS = round(float64(made[0])/total[0].Seconds(), 1)
		res.LayeredCreatesPerS = round(float64(made[1])/total[1].Seconds(), 1)
		res.DirCreateP50ms, res.LayeredCreateP50ms = summarize(lats[0]).P50ms, summarize(lats[1]).P50ms
	}
	return run, nil
}
