package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// DensityResult is the outcome of `dsec bench density`.
type DensityResult struct {
	Requested       int     `json:"requested"`
	Sandboxes       int     `json:"sandboxes"`
	BytesPerSandbox int64   `json:"bytes_per_sandbox"`
	TotalBytes      int64   `json:"total_bytes"`
	SlabBytes       int64   `json:"slab_bytes"`
	CreateS         float64 `json:"create_s"`
	TeardownS       float64 `json:"teardown_s"`
	StoppedBy       string  `json:"stopped_by,omitempty"`
}

// meminfo reads /proc/meminfo fields in bytes.
func meminfo() (map[string]int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		if len(fs) > 1 && fs[1] == "kB" {
			n <<= 10
		}
		m[k] = n
	}
	return m, sc.Err()
}

// used is memory in use by anything but reclaimable caches: the kernel's own view
// of what a workload costs (MemTotal - MemAvailable).
func used() (int64, int64, error) {
	m, err := meminfo()
	if err != nil {
		return 0, 0, err
	}
	return m["MemTotal"] - m["MemAvailable"], m["Slab"], nil
}

// Density creates N idle sandboxes, measures the memory they cost together, and
// tears them down. It stops at the first create that fails and says why.
func Density(ctx context.Context, o Options) (DensityResult, error) {
	o.defaults()
	d, cleanup, err := openNode(ctx, o)
	if err != nil {
		return DensityResult{}, err
	}
	res := DensityResult{Requested: o.N}
	time.Sleep(200 * time.Millisecond)
	u0, s0, err := used()
	if err != nil {
		cleanup()
		return res, err
	}
	// Small sandboxes: a density test measures the per-sandbox floor.
	_, wall, _, stop := runLoad(ctx, o.N, o.Parallel, true, func(_, _ int) error {
		_, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: o.Image, MemoryBytes: 64 << 20, DiskBytes: 16 << 20})
		return err
	})
	res.CreateS = round(wall.Seconds(), 3)
	res.Sandboxes = d.Manager.Count()
	if stop != nil {
		res.StoppedBy = stop.Error()
	}
	time.Sleep(time.Second) // let deferred kernel work settle
	u1, s1, err := used()
	if err == nil && res.Sandboxes > 0 {
		res.TotalBytes = u1 - u0
		res.SlabBytes = s1 - s0
		res.BytesPerSandbox = res.TotalBytes / int64(res.Sandboxes)
	}
	t1 := time.Now()
	cleanup()
	res.TeardownS = round(time.Since(t1).Seconds(), 3)
	if n := d.Manager.Count(); n != 0 {
		return res, fmt.Errorf("%d sandboxes left after teardown", n)
	}
	return res, ctx.Err()
}
