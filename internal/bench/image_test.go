package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/image/lazy"
)

func TestMain(m *testing.M) {
	lazy.MaybeMain() // the image bench's nodes start this binary as layerd
	os.Exit(m.Run())
}

func TestImageResultFinish(t *testing.T) {
	r := ImageResult{BlobBytes: 1000, RateBytesPerS: 500,
		Lazy: ColdRun{BytesFetched: 50, FirstOutputS: 0.5}, Full: ColdRun{BytesFetched: 1000, FirstOutputS: 3.0},
		DirCreatesPerS: 200, LayeredCreatesPerS: 185}
	r.finish()
	if r.FetchedFraction != 0.05 || r.BytesFetched != 50 || r.Speedup != 6 || r.CreateRatio != 0.925 ||
		r.LazyFirstOutputS != 0.5 || r.FullFirstOutputS != 3.0 || r.FullTransferFloorS != 2 || r.SpeedupVsFloor != 4 {
		t.Errorf("finish: %+v", r)
	}
	if !r.Targets.FetchedUnder10pct || !r.Targets.Speedup5x || !r.Targets.CreateWithin10pct {
		t.Errorf("targets: %+v", r.Targets)
	}
	r = ImageResult{BlobBytes: 1000, Lazy: ColdRun{BytesFetched: 101, FirstOutputS: 1}, Full: ColdRun{FirstOutputS: 4.99},
		DirCreatesPerS: 100, LayeredCreatesPerS: 89.9}
	r.finish()
	if r.Targets.FetchedUnder10pct || r.Targets.Speedup5x || r.Targets.CreateWithin10pct {
		t.Errorf("targets should fail: %+v %+v", r, r.Targets)
	}
	// Nothing measured: no division by zero, no target met.
	r = ImageResult{}
	r.finish()
	if r.FetchedFraction != 0 || r.Speedup != 0 || r.CreateRatio != 0 || r.Targets.FetchedUnder10pct {
		t.Errorf("empty: %+v", r)
	}
	if fraction(1, 3) != 0.3333 || fraction(1, 0) != 0 {
		t.Errorf("fraction: %v %v", fraction(1, 3), fraction(1, 0))
	}
}

// TestImageBenchBusybox runs the image bench end to end on the small busybox image:
// a layer built, a lazy and a full node, the create comparison, and nothing left
// behind (mounts, layerd processes).
func TestImageBenchBusybox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	imagesDir := os.Getenv("DSEC_IMAGES_DIR")
	if imagesDir == "" {
		imagesDir = daemon.DefaultImagesDir
	}
	if _, err := os.Stat(filepath.Join(imagesDir, "busybox", "image.json")); err != nil {
		t.Skip("needs the busybox image (make setup)")
	}
	scratch, err := os.MkdirTemp("/var/lib/dsec", "bench-image-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(scratch)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	r, err := Image(ctx, ImageOptions{
		Options:   Options{Image: "busybox", N: 8, Parallel: 2},
		ImagesDir: imagesDir, ScratchDir: scratch, ChunkSize: 16 << 10, Sweep: []int64{64 << 10},
		Task: []string{"busybox", "echo", "1"}, Then: []string{"ls", "/bin"},
	})
	t.Logf("%.1f s: blob %d, fetched %d (%v), first output lazy %.3f s full %.3f s, sweep %+v, creates dir %.1f/s layered %.1f/s",
		time.Since(t0).Seconds(), r.BlobBytes, r.BytesFetched, r.FetchedFraction, r.LazyFirstOutputS, r.FullFirstOutputS,
		r.ChunkSweep, r.DirCreatesPerS, r.LayeredCreatesPerS)
	if err != nil {
		t.Fatal(err)
	}
	if r.Lazy.BytesFetched <= 0 || r.FetchedFraction <= 0 || r.FetchedFraction >= 1 {
		t.Errorf("lazy fetched %d of %d (%v)", r.Lazy.BytesFetched, r.BlobBytes, r.FetchedFraction)
	}
	// The whole blob plus its chunk index (a 24-byte header, a sha256 per
	// chunk and the bitmap of its metadata chunks, a bit per chunk).
	chunks := (r.BlobBytes + (16 << 10) - 1) / (16 << 10)
	index := 24 + 32*chunks + (chunks+7)/8
	if r.Full.BytesFetched != r.BlobBytes+index || !r.Full.Verified {
		t.Errorf("full run fetched %d of %d + %d of index, verified %v", r.Full.BytesFetched, r.BlobBytes, index, r.Full.Verified)
	}
	if r.Speedup <= 0 || r.Lazy.FirstOutputS <= 0 || r.Full.FirstOutputS <= 0 {
		t.Errorf("speedup %v from %v / %v", r.Speedup, r.Full.FirstOutputS, r.Lazy.FirstOutputS)
	}
	if !strings.HasPrefix(r.Lazy.Output, "1\n") || r.Lazy.LoopDirectIO {
		t.Errorf("lazy run: %+v", r.Lazy)
	}
	if r.Prefetch.Mode != "prefetch" || !strings.HasPrefix(r.Prefetch.Output, "1\n") || r.PrefetchFirstOutputS <= 0 || r.Prefetch.BytesFetched < r.Lazy.BytesFetched/2 {
		t.Errorf("prefetch run: %+v", r.Prefetch)
	}
	if len(r.ChunkSweep) != 1 || r.ChunkSweep[0].BytesFetched <= 0 {
		t.Errorf("sweep: %+v", r.ChunkSweep)
	}
	if r.DirCreatesPerS <= 0 || r.LayeredCreatesPerS <= 0 || r.CreateRatio <= 0 || r.Failures > 0 {
		t.Errorf("create rates: dir %v layered %v ratio %v failures %d %s", r.DirCreatesPerS, r.LayeredCreatesPerS, r.CreateRatio, r.Failures, r.FirstError)
	}
	if m := MountsUnder(scratch); len(m) > 0 {
		t.Errorf("left mounted: %v", m)
	}
	if pids := layerdsUnder(scratch); len(pids) > 0 {
		t.Errorf("layerd processes left: %v", pids)
	}
}

// layerdsUnder finds layerd processes whose config names a root under dir.
func layerdsUnder(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if strings.HasPrefix(kv, lazy.EnvMain+"=") && strings.Contains(kv, dir) {
				out = append(out, pid)
			}
		}
	}
	return out
}
