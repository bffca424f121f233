// Package placebench is `dsec bench placement`: the real placement engine over a
// simulated cluster (a placement.MemSource whose simulated agents only admit), from
// several goroutines and engine instances, with the snapshot refreshed every N
// placements so it includes what was admitted. It reports throughput, the spread
// of sandboxes per node, rejections and re-placements when some nodes reject, and
// the resource_exhausted answers when the cluster has room for only half.
package placebench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsec-dev/dsec/internal/cluster/placement"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Options configures a run; zero fields take the defaults in Defaults.
type Options struct {
	Nodes          int     `json:"nodes"`
	Sandboxes      int     `json:"sandboxes"`
	Goroutines     int     `json:"goroutines"`
	Engines        int     `json:"engines"`       // independent engines (API servers) sharing the cluster
	K              int     `json:"k"`             // power-of-k
	RefreshEvery   int     `json:"refresh_every"` // placements per engine between snapshots
	CapacityFactor float64 `json:"capacity_factor"`
	RejectFraction float64 `json:"reject_fraction"` // nodes that reject, in the rejection phase
	RejectProb     float64 `json:"reject_prob"`     // how often such a node rejects
	Environments   int     `json:"environments"`
	Batch          int     `json:"batch"` // one PlaceBatch of this size (0: skip)
	Seed           uint64  `json:"seed"`
}

// Defaults: DSec's scale unit, 160 nodes and 380,000 sandboxes.
var Defaults = Options{
	Nodes: 160, Sandboxes: 380_000, Goroutines: 8, Engines: 2, K: 2, RefreshEvery: 1000,
	CapacityFactor: 1.1, RejectFraction: 0.1, RejectProb: 0.5, Environments: 20, Batch: 32_000, Seed: 1,
}

func (o Options) withDefaults() Options {
	d := Defaults
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&o.Nodes, d.Nodes)
	set(&o.Sandboxes, d.Sandboxes)
	set(&o.Goroutines, d.Goroutines)
	set(&o.Engines, d.Engines)
	set(&o.K, d.K)
	set(&o.RefreshEvery, d.RefreshEvery)
	set(&o.Environments, d.Environments)
	if o.CapacityFactor <= 0 {
		o.CapacityFactor = d.CapacityFactor
	}
	if o.RejectFraction <= 0 {
		o.RejectFraction = d.RejectFraction
	}
	if o.RejectProb <= 0 {
		o.RejectProb = d.RejectProb
	}
	if o.Seed == 0 {
		o.Seed = d.Seed
	}
	return o
}

// Phase is one run over a fresh simulated cluster.
type Phase struct {
	Name           string  `json:"name"`
	CapacityFactor float64 `json:"capacity_factor"` // cluster sandbox slots / sandboxes asked for
	RejectFraction float64 `json:"reject_fraction"`
	Attempts       int64   `json:"attempts"`   // sandboxes asked for
	Placements     int64   `json:"placements"` // admitted
	ElapsedS       float64 `json:"elapsed_s"`
	// PlacementsPerS is answered placement requests (admitted or refused) per second.
	PlacementsPerS float64 `json:"placements_per_s"`
	Exhausted      int64   `json:"resource_exhausted"`
	// ExhaustedWithRetryAfter counts the resource_exhausted answers that carried a
	// positive Retry-After (all of them, or the engine is wrong).
	ExhaustedWithRetryAfter int64   `json:"resource_exhausted_with_retry_after"`
	RetryAfterS             float64 `json:"retry_after_s"`
	OtherErrors             int64   `json:"other_errors"`
	FirstError              string  `json:"first_error,omitempty"`
	Rejections              int64   `json:"rejections"`
	Replacements            int64   `json:"replacements"`
	// AdmissionFull counts agent rejections because the node was really full: the
	// engines' views (snapshot + own in-flight) did not include another engine's
	// recent placements.
	AdmissionFull int64 `json:"admission_full"`
	// Sandboxes per node at the end, over the mean.
	SpreadMaxOverMean float64 `json:"spread_max_over_mean"`
	SpreadP99OverMean float64 `json:"spread_p99_over_mean"`
	SpreadMinOverMean float64 `json:"spread_min_over_mean"`
	// LocalityHit is the fraction of placements on a node that already mounted all
	// of the environment's layers.
	LocalityHit   float64    `json:"locality_hit"`
	Refreshes     int64      `json:"refreshes"`
	LoadAvgBefore [3]float64 `json:"loadavg_before"`
	LoadAvgAfter  [3]float64 `json:"loadavg_after"`
}

// BatchResult is one PlaceBatch call on a fresh cluster.
type BatchResult struct {
	N             int        `json:"n"`
	Ms            float64    `json:"ms"`
	PerS          float64    `json:"placements_per_s"`
	Error         string     `json:"error,omitempty"`
	LoadAvgBefore [3]float64 `json:"loadavg_before"`
}

// Result is the whole benchmark.
type Result struct {
	Options Options `json:"options"`
	// The headline figures are the main phase's.
	PlacementsPerS    float64      `json:"placements_per_s"`
	SpreadMaxOverMean float64      `json:"spread_max_over_mean"`
	SpreadP99OverMean float64      `json:"spread_p99_over_mean"`
	Main              Phase        `json:"main"`
	Rejecting         Phase        `json:"rejecting"`
	HalfCapacity      Phase        `json:"half_capacity"`
	Batch             *BatchResult `json:"batch,omitempty"`
}

// Run runs every phase.
func Run(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	r := &Result{Options: o}
	var err error
	if r.Main, err = runPhase(ctx, o, "main", o.CapacityFactor, 0); err != nil {
		return nil, err
	}
	if r.Rejecting, err = runPhase(ctx, o, "rejecting", o.CapacityFactor, o.RejectFraction); err != nil {
		return nil, err
	}
	if r.HalfCapacity, err = runPhase(ctx, o, "half_capacity", 0.5, 0); err != nil {
		return nil, err
	}
	if o.Batch > 0 {
		r.Batch = runBatch(ctx, o)
	}
	r.PlacementsPerS = r.Main.PlacementsPerS
	r.SpreadMaxOverMean, r.SpreadP99OverMean = r.Main.SpreadMaxOverMean, r.Main.SpreadP99OverMean
	return r, nil
}

// sizes is the request mix: half small, 40% medium, 10% large.
var sizes = [10][2]int64{
	{250, 256 << 20}, {250, 256 << 20}, {250, 256 << 20}, {250, 256 << 20}, {250, 256 << 20},
	{1000, 1 << 30}, {1000, 1 << 30}, {1000, 1 << 30}, {1000, 1 << 30}, {2000, 2 << 30},
}

func envLayers(env int) []string {
	return []string{fmt.Sprintf("sha256:base-%d", env%4), fmt.Sprintf("sha256:tools-%d", env), fmt.Sprintf("sha256:work-%d", env)}
}

// cluster builds nodes with room for factor × sandboxes: per slot 1 CPU and 1 GiB
// committed (DSec-like: ~2,600 sandboxes on a node of ~200 cores with 50x CPU
// overcommit), each node mounting the layers of 4 random environments.
func cluster(o Options, factor float64, rng *rand.Rand) []placement.Node {
	slots := int64(math.Ceil(float64(o.Sandboxes) * factor / float64(o.Nodes)))
	nodes := make([]placement.Node, o.Nodes)
	for i := range nodes {
		var layers []string
		for j := 0; j < 4; j++ {
			for _, l := range envLayers(rng.IntN(o.Environments)) {
				if !slices.Contains(layers, l) {
					layers = append(layers, l)
				}
			}
		}
		nodes[i] = placement.Node{
			Name: fmt.Sprintf("node-%03d", i), State: placement.StateReady,
			Backends: []string{"container", "microvm", "fncall"},
			Labels:   map[string]string{"rack": strconv.Itoa(i % 8)},
			Capacity: placement.Resources{Sandboxes: slots, MilliCPU: slots * 1000, MemoryBytes: slots << 30},
			Layers:   layers,
		}
	}
	return nodes
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

var errLocalPressure = errdefs.New(api.CodeResourceExhausted, "agent: local pressure")
var errNodeFull = errdefs.New(api.CodeResourceExhausted, "agent: node full")

func runPhase(ctx context.Context, o Options, name string, factor, rejectFraction float64) (Phase, error) {
	rng := rand.New(rand.NewPCG(o.Seed, uint64(len(name))))
	src := placement.NewMemSource(cluster(o, factor, rng)...)
	rejecting := map[string]bool{}
	for i := 0; i < int(math.Round(rejectFraction*float64(o.Nodes))); i++ {
		rejecting[fmt.Sprintf("node-%03d", rng.IntN(o.Nodes))] = true
	}
	engines := make([]*placement.Engine, o.Engines)
	for i := range engines {
		engines[i] = placement.New(src, placement.Config{K: o.K, Seed: o.Seed + uint64(i) + 1})
		if err := engines[i].Refresh(ctx); err != nil {
			return Phase{}, err
		}
	}
	reqs := make([]placement.Request, o.Environments*len(sizes))
	for env := 0; env < o.Environments; env++ {
		for s, sz := range sizes {
			reqs[env*len(sizes)+s] = placement.Request{Backend: "container", MilliCPU: sz[0], MemoryBytes: sz[1], Layers: envLayers(env)}
		}
	}
	rejectBelow := uint64(o.RejectProb * float64(math.MaxUint64))
	var full, hits atomic.Int64
	admit := func(_ context.Context, d *placement.Decision) error {
		if rejecting[d.Node] && splitmix(d.ID^o.Seed) < rejectBelow {
			return errLocalPressure
		}
		ok, hit := false, true
		req := d.Request()
		src.Update(d.Node, func(n *placement.Node) {
			if n.Load.Sandboxes+1 > n.Capacity.Sandboxes || n.Load.MilliCPU+req.MilliCPU > n.Capacity.MilliCPU || n.Load.MemoryBytes+req.MemoryBytes > n.Capacity.MemoryBytes {
				return // the agent's own admission check: really full
			}
			ok = true
			n.Load.Sandboxes++
			n.Load.MilliCPU += req.MilliCPU
			n.Load.MemoryBytes += req.MemoryBytes
			for _, l := range req.Layers {
				if !slices.Contains(n.Layers, l) {
					hit = false
					n.Layers = append(n.Layers, l)
				}
			}
		})
		if !ok {
			full.Add(1)
			return errNodeFull
		}
		if hit {
			hits.Add(1)
		}
		return nil
	}

	ph := Phase{Name: name, CapacityFactor: factor, RejectFraction: rejectFraction, Attempts: int64(o.Sandboxes), LoadAvgBefore: loadavg()}
	var next atomic.Int64
	counts := make([]atomic.Int64, len(engines))
	var placed, exhaustedN, withRA, other atomic.Int64
	var retryAfter atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := 0; g < o.Goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			ei := g % len(engines)
			e := engines[ei]
			for {
				i := next.Add(1) - 1
				if i >= int64(o.Sandboxes) || ctx.Err() != nil {
					return
				}
				if c := counts[ei].Add(1); c%int64(o.RefreshEvery) == 0 {
					if err := e.Refresh(ctx); err != nil {
						firstErr.Do(func() { ph.FirstError = err.Error() })
					}
				}
				req := reqs[int(i)%len(reqs)]
				_, err := e.PlaceAndAdmit(ctx, req, admit)
				switch {
				case err == nil:
					placed.Add(1)
				case errdefs.Is(err, api.CodeResourceExhausted):
					exhaustedN.Add(1)
					if ra, ok := placement.RetryAfter(err); ok && ra > 0 {
						withRA.Add(1)
						retryAfter.Store(int64(ra))
					}
				default:
					other.Add(1)
					firstErr.Do(func() { ph.FirstError = err.Error() })
				}
			}
		}(g)
	}
	wg.Wait()
	el := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return ph, err
	}
	ph.LoadAvgAfter = loadavg()
	ph.ElapsedS = round(el.Seconds(), 3)
	ph.Placements, ph.Exhausted, ph.ExhaustedWithRetryAfter, ph.OtherErrors = placed.Load(), exhaustedN.Load(), withRA.Load(), other.Load()
	ph.PlacementsPerS = round(float64(o.Sandboxes)/el.Seconds(), 1)
	ph.RetryAfterS = time.Duration(retryAfter.Load()).Seconds()
	ph.AdmissionFull = full.Load()
	for _, e := range engines {
		st := e.Stats()
		ph.Rejections += st.Rejections
		ph.Replacements += st.Replacements
		ph.Refreshes += st.Refreshes
	}
	if ph.Placements > 0 {
		ph.LocalityHit = round(float64(hits.Load())/float64(ph.Placements), 3)
	}
	snap, err := src.Snapshot(ctx)
	if err != nil {
		return ph, err
	}
	per := make([]float64, len(snap))
	total := 0.0
	for i, n := range snap {
		per[i] = float64(n.Load.Sandboxes)
		total += per[i]
	}
	slices.Sort(per)
	if mean := total / float64(len(per)); mean > 0 {
		ph.SpreadMaxOverMean = round(per[len(per)-1]/mean, 4)
		ph.SpreadP99OverMean = round(per[int(math.Ceil(0.99*float64(len(per))))-1]/mean, 4)
		ph.SpreadMinOverMean = round(per[0]/mean, 4)
	}
	return ph, nil
}

func runBatch(ctx context.Context, o Options) *BatchResult {
	rng := rand.New(rand.NewPCG(o.Seed, 99))
	bo := o
	bo.Sandboxes = o.Batch
	src := placement.NewMemSource(cluster(bo, o.CapacityFactor, rng)...)
	e := placement.New(src, placement.Config{K: o.K, Seed: o.Seed})
	br := &BatchResult{N: o.Batch, LoadAvgBefore: loadavg()}
	if err := e.Refresh(ctx); err != nil {
		br.Error = err.Error()
		return br
	}
	t0 := time.Now()
	_, err := e.PlaceBatch(ctx, placement.Request{Backend: "container", MilliCPU: 250, MemoryBytes: 256 << 20, Layers: envLayers(0)}, o.Batch)
	el := time.Since(t0)
	if err != nil {
		br.Error = err.Error()
	}
	br.Ms = round(float64(el.Microseconds())/1000, 3)
	br.PerS = round(float64(o.Batch)/el.Seconds(), 1)
	return br
}

func loadavg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

func round(f float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(f*p) / p
}
