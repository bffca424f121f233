package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
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
	// FirstRate and LastRate are creates per second of the first and the last
	// 1,000 sandboxes (of the first and last tenth when N < 2,000); RateAt2400
	// is the rate of the 200 creates that took the node from 2,300 to 2,500
	// live sandboxes (0 when N < 2,500). RatePer1000 is the rate of each block
	// of 1,000 creates in order.
	FirstRate   float64   `json:"first_rate_per_s"`
	LastRate    float64   `json:"last_rate_per_s"`
	RateAt2400  float64   `json:"rate_at_2400_per_s,omitempty"`
	RatePer1000 []float64 `json:"rate_per_1000,omitempty"`
	// MemcgsPerSandbox is how many memory cgroups each sandbox added
	// (/proc/cgroups); SuperblocksPerSandbox how many distinct file systems
	// one sandbox's mount table shows, plus the mqueue file system the
	// kernel makes for its IPC namespace (every superblock registers a
	// memcg-aware shrinker, and every memcg on the host pays per-shrinker
	// state: cost per sandbox ~ memcgs x superblocks on the host).
	MemcgsPerSandbox      float64 `json:"memcgs_per_sandbox"`
	SuperblocksPerSandbox int     `json:"superblocks_per_sandbox"`
	Filesystems           string  `json:"filesystems,omitempty"`
	// ShrinkerUnitsPerMemcg is the host's kmalloc-1k objects per memory
	// cgroup with the sandboxes up: nearly all of them are memcg shrinker
	// table units (one per 64 shrinker ids the host has had since boot), so
	// 64 times this is about the host's high-water superblock count, which
	// sets what every new memcg costs (a fresh boot: low).
	ShrinkerUnitsPerMemcg float64 `json:"shrinker_units_per_memcg,omitempty"`
	// SlabTop is the slab caches that grew most, bytes per sandbox.
	SlabTop   []SlabDelta `json:"slab_top,omitempty"`
	StoppedBy string      `json:"stopped_by,omitempty"`
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
	slab0, _ := readSlabinfo()
	cg0 := memcgCount()
	// done[k] is when the (k+1)-th create finished, in completion order.
	done := make([]time.Time, 0, o.N)
	var mu sync.Mutex
	var firstID, lastID string
	t0 := time.Now()
	// Small sandboxes: a density test measures the per-sandbox floor.
	_, wall, _, stop := runLoad(ctx, o.N, o.Parallel, true, func(_, _ int) error {
		sb, err := d.Manager.Create(ctx, api.CreateSandboxRequest{Image: o.Image, MemoryBytes: 64 << 20, DiskBytes: 16 << 20})
		if err == nil {
			mu.Lock()
			done = append(done, time.Now())
			lastID = sb.ID
			if firstID == "" {
				firstID = sb.ID
			}
			mu.Unlock()
		}
		return err
	})
	res.CreateS = round(wall.Seconds(), 3)
	res.Sandboxes = d.Manager.Count()
	if stop != nil {
		res.StoppedBy = stop.Error()
	}
	res.FirstRate, res.LastRate, res.RateAt2400, res.RatePer1000 = createRates(t0, done)
	time.Sleep(time.Second) // let deferred kernel work settle
	u1, s1, err := used()
	if err == nil && res.Sandboxes > 0 {
		n := int64(res.Sandboxes)
		res.TotalBytes = u1 - u0
		res.SlabBytes = s1 - s0
		res.BytesPerSandbox = res.TotalBytes / n
		if slab1, err := readSlabinfo(); err == nil {
			if slab0 != nil {
				res.SlabTop = slabTop(slab0, slab1, n, 10)
			}
			if cgs := memcgCount(); cgs > 0 {
				res.ShrinkerUnitsPerMemcg = round(float64(slab1["kmalloc-1k"].objs)/float64(cgs), 1)
			}
		}
		if cg0 >= 0 {
			res.MemcgsPerSandbox = round(float64(memcgCount()-cg0)/float64(n), 2)
		}
		if lastID != "" {
			res.SuperblocksPerSandbox, res.Filesystems = sandboxSuperblocks(ctx, d.Manager, firstID, lastID)
		}
	}
	t1 := time.Now()
	cleanup()
	res.TeardownS = round(time.Since(t1).Seconds(), 3)
	if n := d.Manager.Count(); n != 0 {
		return res, fmt.Errorf("%d sandboxes left after teardown", n)
	}
	return res, ctx.Err()
}

// createRates turns completion times into creates per second: the first and
// last block (1,000, or a tenth of the run when it is shorter than 2,000), the
// 200 creates around 2,400 live sandboxes, and every block of 1,000.
func createRates(t0 time.Time, done []time.Time) (first, last, at2400 float64, per1000 []float64) {
	n := len(done)
	if n == 0 {
		return 0, 0, 0, nil
	}
	at := func(k int) time.Time { // when k creates had finished
		if k == 0 {
			return t0
		}
		return done[k-1]
	}
	rate := func(a, b int) float64 {
		s := at(b).Sub(at(a)).Seconds()
		if s <= 0 {
			return 0
		}
		return round(float64(b-a)/s, 1)
	}
	block := 1000
	if n < 2000 {
		block = max(n/10, 1)
	}
	first, last = rate(0, block), rate(n-block, n)
	if n >= 2500 {
		at2400 = rate(2300, 2500)
	}
	if n >= 2000 {
		for k := 0; k+1000 <= n; k += 1000 {
			per1000 = append(per1000, rate(k, k+1000))
		}
	}
	return first, last, at2400, per1000
}

// execer runs a command in a sandbox (the agent's Manager).
type execer interface {
	Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error)
}

// sandboxSuperblocks counts the file systems of sandbox id's mount table that
// sandbox other does not share (its own superblocks; shared ones, like the
// node's read-only sysfs, are listed as "shared:TYPE"), plus the mqueue
// superblock the kernel makes for its IPC namespace even when it is not
// mounted.
func sandboxSuperblocks(ctx context.Context, m execer, other, id string) (int, string) {
	devs := func(id string) map[string]string {
		r, err := m.Exec(ctx, id, api.ExecRequest{Cmd: []string{"cat", "/proc/self/mountinfo"}})
		if err != nil || r.ExitCode != 0 {
			return nil
		}
		out := map[string]string{}
		for _, line := range strings.Split(r.Stdout, "\n") {
			f := strings.Fields(line)
			sep := -1
			for i, x := range f {
				if x == "-" {
					sep = i
					break
				}
			}
			if len(f) >= 3 && sep >= 0 && sep+1 < len(f) {
				out[f[2]] = f[sep+1]
			}
		}
		return out
	}
	mine, theirs := devs(id), devs(other)
	if mine == nil {
		return 0, ""
	}
	n, types, mq := 0, []string{}, false
	for dev, t := range mine {
		if _, shared := theirs[dev]; shared && other != id {
			types = append(types, "shared:"+t)
			continue
		}
		n++
		types = append(types, t)
		mq = mq || t == "mqueue"
	}
	if !mq {
		types = append(types, "mqueue(ipc ns)")
		n++
	}
	sort.Strings(types)
	return n, strings.Join(types, ",")
}
