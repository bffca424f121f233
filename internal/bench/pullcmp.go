package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/bench/peer"
	"github.com/dsec-dev/dsec/pkg/api"
)

// pullPeer is a peer of `bench pull --compare`: cold runs `true` in a
// container of the image, pulled from the registry into empty storage.
type pullPeer struct {
	name   string
	res    *PullPeer
	cold   func(ctx context.Context) (time.Duration, error)
	driver func() (name, note string)
}

// pullPeerSides returns the peers o.Compare names that can run here, and
// why the others cannot.
func pullPeerSides(o PullOptions, ref string) ([]*pullPeer, map[string]string) {
	var out []*pullPeer
	skipped := map[string]string{}
	for _, name := range o.Compare {
		// podman is the only one (normalize refuses others).
		if _, err := exec.LookPath("podman"); err != nil {
			skipped[name] = fmt.Sprintf("podman not installed (Debian package podman): %v", err)
			continue
		}
		pd := newPodmanDriver(o)
		out = append(out, &pullPeer{name: name,
			res: &PullPeer{Work: "podman run --rm --tls-verify=false --network none REF true (runc, cgroupfs), " +
				"its --root and --runroot a new directory each round (nothing cached), the image pulled from the same registry"},
			cold: func(ctx context.Context) (time.Duration, error) {
				var d time.Duration
				err := pd.with(ctx, func(pm *peer.Podman) error {
					t0 := time.Now()
					_, err := pm.Run(ctx, "run", "--rm", "--tls-verify=false", "--network", "none", "--cgroup-parent", pm.CgroupParent(), ref, "true")
					d = time.Since(t0)
					return err
				})
				return d, err
			},
			driver: func() (string, string) { return pd.driver, pd.note }})
	}
	return out, skipped
}

// podmanDriver picks podman's storage driver: the one asked for, or overlay
// until a run fails on it, then vfs.
type podmanDriver struct {
	driver string
	auto   bool
	// note says why overlay was given up.
	note string
	log  func(msg string, args ...any)
}

func newPodmanDriver(o PullOptions) *podmanDriver {
	pd := &podmanDriver{driver: o.PodmanDriver, log: o.Logger.Warn}
	if pd.driver == "" {
		pd.driver, pd.auto = "overlay", true
	}
	return pd
}

// with runs f on a podman with empty storage of its own, removed afterwards
// (containers, mounts, directory).
func (pd *podmanDriver) with(ctx context.Context, f func(*peer.Podman) error) error {
	run := func() error {
		pm, err := peer.NewPodman(peer.Work{}, pd.driver)
		if err != nil {
			return err
		}
		return errors.Join(f(pm), pm.Close())
	}
	err := run()
	if err != nil && pd.auto && pd.driver == "overlay" && ctx.Err() == nil {
		pd.log("podman on overlay storage failed; vfs from now on", "err", err)
		pd.driver, pd.note = "vfs", "overlay failed here: "+err.Error()
		err = run()
	}
	return err
}

// BurstPullResult is the outcome of the burst: Sandboxes sandboxes over
// Images images sharing a base layer, created at once (Workers at a time),
// each answering one exec of Task.
type BurstPullResult struct {
	Sandboxes int `json:"sandboxes"`
	Images    int `json:"images"`
	Workers   int `json:"workers"`
	// ImageContentBytes is each image's generated files, SharedContentBytes
	// the part of them in the base layer all images share; CompressedBytes
	// adds up the distinct layers pushed.
	ImageContentBytes  int64  `json:"image_content_bytes"`
	SharedContentBytes int64  `json:"shared_content_bytes"`
	CompressedBytes    int64  `json:"compressed_bytes"`
	Task               string `json:"task"`
	// Sides: "dsec" and each peer's.
	Sides map[string]*BurstSide `json:"sides"`
	// RatiosAllAnswered are "dsec/PEER" of the time until all answered
	// (below 1: dsec faster); RatiosDiskBytes "dsec/PEER" and
	// "dsec-node-local/PEER" of the bytes left on local disk.
	RatiosAllAnswered map[string]float64 `json:"ratios_all_answered,omitempty"`
	RatiosDiskBytes   map[string]float64 `json:"ratios_disk_bytes,omitempty"`
	Skipped           map[string]string  `json:"skipped,omitempty"`
}

// BurstSide is one side of the burst.
type BurstSide struct {
	Work string `json:"work"`
	// AllAnsweredS is from the first create (podman: the first pull) until
	// every sandbox answered its exec; PullS the pulls before the runs
	// (podman); PerSandbox each sandbox's create (run) → exec answered.
	AllAnsweredS float64   `json:"all_answered_s"`
	PullS        float64   `json:"pull_s,omitempty"`
	PerSandbox   Latencies `json:"per_sandbox"`
	// DiskBytes is what the side's storage takes on local disk once every
	// sandbox answered (allocated blocks, as du counts them). For dsec,
	// BlobStoreBytes is the part in its blob store (shared by a cluster's
	// nodes, so not each node's) and NodeLocalBytes the rest: records and
	// the chunks its lazy layers read.
	DiskBytes      int64            `json:"disk_bytes"`
	BlobStoreBytes int64            `json:"blob_store_bytes,omitempty"`
	NodeLocalBytes int64            `json:"node_local_bytes,omitempty"`
	DiskBytesByDir map[string]int64 `json:"disk_bytes_by_dir,omitempty"`
	StorageDriver  string           `json:"storage_driver,omitempty"`
	StorageNote    string           `json:"storage_driver_note,omitempty"`
	// dsec: ImageBytes adds up the images' EROFS layers (shared ones once),
	// FetchedBytes what the sandboxes' reads fetched of them; FractionRead
	// is their ratio and PerImageFractionRead each image's (its layers'
	// bytes fetched / its size; the base's reads count for every image).
	ImageBytes           int64     `json:"image_bytes,omitempty"`
	FetchedBytes         int64     `json:"fetched_bytes,omitempty"`
	FractionRead         float64   `json:"fraction_read,omitempty"`
	PerImageFractionRead []float64 `json:"per_image_fraction_read,omitempty"`
	Failures             int       `json:"failures"`
	FirstError           string    `json:"first_error,omitempty"`
}

// burstTask reads four files of the shared base layer and four of the
// image's own, as an import reads a few modules of a large tree.
const burstTask = "cat /bench/base/f000[0-3].bin /bench/own/f000[0-3].bin >/dev/null"

// burstPull pushes o.BurstImages images (base: the directory image's tree
// and a generated layer they share; each its own generated layer), then runs
// the burst on a fresh dsec node and on each peer, one side after the other.
func burstPull(ctx context.Context, o PullOptions, reg *countingRegistry, base v1.Layer) (BurstPullResult, error) {
	half := o.BurstImageBytes / 2
	res := BurstPullResult{Sandboxes: o.Burst, Images: o.BurstImages, Workers: o.Parallel,
		ImageContentBytes: 2 * half, SharedContentBytes: half, Task: burstTask, Sides: map[string]*BurstSide{}}
	shared, err := genLayer(1, "bench/base", half)
	if err != nil {
		return res, err
	}
	layers := []v1.Layer{base, shared}
	refs := make([]string, o.BurstImages)
	for k := range refs {
		own, err := genLayer(uint64(100+k), "bench/own", half)
		if err != nil {
			return res, err
		}
		layers = append(layers, own)
		o.Logger.Info("pushing a burst image", "image", k+1, "of", len(refs))
		if refs[k], err = reg.push(ctx, fmt.Sprintf("bench/burst-%d", k), []v1.Layer{base, shared, own}); err != nil {
			return res, err
		}
	}
	for _, l := range layers {
		sz, _ := l.Size()
		res.CompressedBytes += sz
	}

	var errs []error
	ds, err := burstDsec(ctx, o, reg, refs)
	if err != nil {
		errs = append(errs, fmt.Errorf("dsec: %w", err))
	}
	res.Sides["dsec"] = ds
	for _, name := range o.Compare {
		if _, err := exec.LookPath("podman"); err != nil {
			res.Skipped = map[string]string{name: fmt.Sprintf("podman not installed (Debian package podman): %v", err)}
			continue
		}
		ps, err := burstPodman(ctx, o, refs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		res.Sides[name] = ps
		if ps.AllAnsweredS > 0 && ps.DiskBytes > 0 {
			if res.RatiosAllAnswered == nil {
				res.RatiosAllAnswered, res.RatiosDiskBytes = map[string]float64{}, map[string]float64{}
			}
			res.RatiosAllAnswered["dsec/"+name] = round(ds.AllAnsweredS/ps.AllAnsweredS, 3)
			res.RatiosDiskBytes["dsec/"+name] = round(float64(ds.DiskBytes)/float64(ps.DiskBytes), 3)
			res.RatiosDiskBytes["dsec-node-local/"+name] = round(float64(ds.NodeLocalBytes)/float64(ps.DiskBytes), 3)
		}
	}
	return res, errors.Join(errs...)
}

func (s *BurstSide) fail(err error) {
	s.Failures++
	if s.FirstError == "" {
		s.FirstError = err.Error()
	}
}

// burstDsec runs the burst on a fresh node (empty blob store of its own).
func burstDsec(ctx context.Context, o PullOptions, reg *countingRegistry, refs []string) (*BurstSide, error) {
	side := &BurstSide{Work: "create by reference (the node pulls each image once: fetch, convert to EROFS into its blob store), then exec sh -c TASK; layers read lazily"}
	dir, err := os.MkdirTemp("/var/lib/dsec", "bench-burst-")
	if err != nil {
		return side, err
	}
	defer os.RemoveAll(dir)
	no := o.Options
	no.DataDir = dir
	d, done, err := openNode(ctx, no, func(c *daemon.Config) { c.Registries.Insecure = []string{reg.host} })
	if err != nil {
		return side, err
	}
	defer done()
	lat, wall, failures, first := runLoad(ctx, o.Burst, o.Parallel, false, func(_, i int) error {
		sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Backend: "container", Image: refs[i%len(refs)]})
		if err != nil {
			return err
		}
		r, err := d.Manager.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", burstTask}, TimeoutMs: 120000})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exec: exit %d: %s", r.ExitCode, r.Stderr)
		}
		return err
	})
	side.AllAnsweredS, side.PerSandbox = round(wall.Seconds(), 3), summarize(lat)
	if first != nil {
		side.Failures, side.FirstError = failures, first.Error()
	}
	side.DiskBytes = diskUsage(dir)
	side.BlobStoreBytes = diskUsage(filepath.Join(dir, "blobs"))
	side.NodeLocalBytes = side.DiskBytes - side.BlobStoreBytes
	side.DiskBytesByDir = diskUsageByDir(dir)
	imgs, err := d.NodeService().Images(ctx)
	if err != nil {
		return side, err
	}
	seen := map[string]bool{}
	for _, img := range imgs {
		if !strings.Contains(img.Ref, "/bench/burst-") || img.Size == 0 {
			continue
		}
		side.PerImageFractionRead = append(side.PerImageFractionRead, round(float64(img.BytesFetched)/float64(img.Size), 4))
		for _, l := range img.Layers {
			if !seen[l.Digest] {
				seen[l.Digest] = true
				side.ImageBytes += l.Size
				side.FetchedBytes += l.BytesFetched
			}
		}
	}
	if side.ImageBytes > 0 {
		side.FractionRead = round(float64(side.FetchedBytes)/float64(side.ImageBytes), 4)
	}
	return side, nil
}

// burstPodman runs the burst on podman with empty storage: pull every
// image, then run each sandbox (run -d, then exec TASK).
func burstPodman(ctx context.Context, o PullOptions, refs []string) (*BurstSide, error) {
	pd := newPodmanDriver(o)
	side := &BurstSide{Work: "podman pull --tls-verify=false of each image (in parallel), then per sandbox podman run -d --network none REF sleep 3600 and podman exec NAME sh -c TASK (runc, cgroupfs)"}
	err := pd.with(ctx, func(pm *peer.Podman) error {
		*side = BurstSide{Work: side.Work}
		// The storage set up once before the pulls in parallel (podman's
		// overlay driver set up by concurrent first uses can fail).
		if _, err := pm.Run(ctx, "info", "--format", "{{.Store.GraphDriverName}}"); err != nil {
			return err
		}
		t0 := time.Now()
		_, _, pf, pfirst := runLoad(ctx, len(refs), o.Parallel, false, func(_, k int) error {
			_, err := pm.Run(ctx, "pull", "-q", "--tls-verify=false", refs[k])
			return err
		})
		side.PullS = round(time.Since(t0).Seconds(), 3)
		if pfirst != nil {
			return fmt.Errorf("%d pulls failed: %w", pf, pfirst)
		}
		lat, _, failures, first := runLoad(ctx, o.Burst, o.Parallel, false, func(_, i int) error {
			name := fmt.Sprintf("dsec-bench-burst-%d", i)
			if _, err := pm.Run(ctx, "run", "-d", "--name", name, "--network", "none", "--cgroup-parent", pm.CgroupParent(), refs[i%len(refs)], "sleep", "3600"); err != nil {
				return err
			}
			_, err := pm.Run(ctx, "exec", name, "sh", "-c", burstTask)
			return err
		})
		side.AllAnsweredS, side.PerSandbox = round(time.Since(t0).Seconds(), 3), summarize(lat)
		if first != nil {
			side.Failures, side.FirstError = failures, first.Error()
		}
		side.DiskBytes = diskUsage(pm.Root())
		side.DiskBytesByDir = diskUsageByDir(pm.Root())
		return nil
	})
	side.StorageDriver, side.StorageNote = pd.driver, pd.note
	if err != nil {
		side.fail(err)
	}
	return side, err
}
