package metrics

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Sandboxes is what NodeCollector reads of the node's sandboxes (the role's
// assembly adapts the node agent): Usage(false) is cheap (no file reads, no
// waiting), Usage(true) also reads every sandbox's memory counter
// (MemoryBytes; -1 where the backend reports none). WarmPool is the node's
// warm pool: the sandboxes started ahead and waiting for a create, and its
// size (0, 0 without one).
type Sandboxes interface {
	Usage(memory bool) []api.SandboxUsage
	Capacity() int
	WarmPool() (waiting, size int)
}

// DefaultMemoryMaxAge is how often Run reads the memory counters: a scrape
// reads sandboxes' states live but their memory (one cgroup file each, ~8 µs:
// 26 ms for 3,200 on an idle machine) from Run's last sample.
const DefaultMemoryMaxAge = 10 * time.Second

// LayerStats reads layerd's accounting (the role's assembly adapts its
// control API's client).
type LayerStats interface {
	LayerStats(ctx context.Context) (Layers, error)
}

// Layers is layerd's accounting summed over the layers it knows.
type Layers struct {
	Running      bool  // false: layerd is not running (it starts with the first layered sandbox)
	FetchedBytes int64 // fetched from blob stores
	BlobBytes    int64 // total size of the layer blobs
	CacheHits    int64 // chunk reads served from the local cache
	CacheMisses  int64 // chunk reads that had to fetch
	CacheBytes   int64 // bytes in the local chunk cache
	Mounted      int64 // layers mounted
}

// FnCallPools reads the FnCall engine's warm pools (the role's assembly adapts
// the engine).
type FnCallPools interface {
	Pools() []Pool
}

// Pool is one warm FnCall pool's occupancy.
type Pool struct {
	Image       string
	Slots, Busy int
}

// NodeCollector reads one node's state at scrape time: sandboxes by backend and
// state, their memory use as a histogram, the node's capacity and load, layerd's
// fetch and cache accounting, and the FnCall pools' occupancy. Any source may be
// nil.
type NodeCollector struct {
	m       *Metrics
	sbs     Sandboxes
	layers  LayerStats
	pools   FnCallPools
	procDir string // /proc (tests point it elsewhere)

	// MemoryMaxAge overrides DefaultMemoryMaxAge (set before Run).
	MemoryMaxAge time.Duration

	memMu sync.Mutex
	memAt time.Time // when mem was read; zero: never
	mem   memSample

	sandboxes, memUsage, memLimit, capacity, cpus, load, memTotal, memAvail   *prometheus.Desc
	warmWaiting, warmSize                                                     *prometheus.Desc
	layerdUp, fetched, blobBytes, hits, misses, hitRatio, cacheBytes, mounted *prometheus.Desc
	poolSlots, poolBusy                                                       *prometheus.Desc
}

// Memory buckets of dsec_sandbox_memory_usage_bytes: 1 MiB to 16 GiB by 4.
var memBuckets = []float64{1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30, 16 << 30}

// NewNodeCollector returns the collector of a node; register it with
// Metrics.Register.
func (m *Metrics) NewNodeCollector(sbs Sandboxes, layers LayerStats, pools FnCallPools) *NodeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	}
	return &NodeCollector{m: m, sbs: sbs, layers: layers, pools: pools, procDir: "/proc", MemoryMaxAge: DefaultMemoryMaxAge,
		sandboxes:   d("sandboxes", "Sandboxes on this node, by backend and state (running, paused, exited).", "backend", "state"),
		memUsage:    d("sandbox_memory_usage_bytes", "Memory used by each sandbox (cgroup usage), as a histogram over this node's sandboxes whose backend reports it."),
		memLimit:    d("node_memory_committed_bytes", "Sum of the memory limits of this node's sandboxes."),
		capacity:    d("node_capacity_sandboxes", "Sandboxes this node admits at most."),
		warmWaiting: d("warm_pool_sandboxes", "Sandboxes started ahead in the node's warm pool and waiting for a create to take them."),
		warmSize:    d("warm_pool_size", "Sandboxes the node's warm pool holds at most (0: no pool)."),
		cpus:        d("node_cpus", "CPUs of this node."),
		load:        d("node_load_average", "The node's load average, by period (1m, 5m, 15m).", "period"),
		memTotal:    d("node_memory_total_bytes", "The node's memory (MemTotal)."),
		memAvail:    d("node_memory_available_bytes", "The node's available memory (MemAvailable)."),
		layerdUp:    d("layerd_up", "1 when layerd answered its stats request, 0 when it is not running (it starts with the first layered sandbox) or failed."),
		fetched:     d("layer_fetched_bytes_total", "Bytes layerd fetched from blob stores for the layers it knows."),
		blobBytes:   d("layer_blob_bytes", "Total size of the layer blobs layerd knows (compare with fetched bytes)."),
		hits:        d("layer_cache_hits_total", "Chunk reads layerd served from its local cache."),
		misses:      d("layer_cache_misses_total", "Chunk reads layerd had to fetch."),
		hitRatio:    d("layer_cache_hit_ratio", "Cache hits over all chunk reads (0 when none yet)."),
		cacheBytes:  d("layer_cache_bytes", "Bytes in layerd's local chunk cache."),
		mounted:     d("layers_mounted", "Layers mounted on this node."),
		poolSlots:   d("fncall_pool_slots", "Concurrent runs a warm FnCall pool holds, by image.", "image"),
		poolBusy:    d("fncall_pool_busy_slots", "Slots of a warm FnCall pool running a call now, by image.", "image"),
	}
}

// Describe implements prometheus.Collector.
func (c *NodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.sandboxes, c.memUsage, c.memLimit, c.capacity, c.warmWaiting, c.warmSize, c.cpus, c.load, c.memTotal, c.memAvail,
		c.layerdUp, c.fetched, c.blobBytes, c.hits, c.misses, c.hitRatio, c.cacheBytes, c.mounted, c.poolSlots, c.poolBusy} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *NodeCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.cpus, float64(runtime.NumCPU()))
	c.collectHost(gauge)
	if c.sbs != nil {
		c.collectSandboxes(ch, gauge)
	}
	if c.layers != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.layers.LayerStats(ctx)
		cancel()
		if err != nil || !st.Running {
			gauge(c.layerdUp, 0)
		} else {
			gauge(c.layerdUp, 1)
			counter(c.fetched, float64(st.FetchedBytes))
			gauge(c.blobBytes, float64(st.BlobBytes))
			counter(c.hits, float64(st.CacheHits))
			counter(c.misses, float64(st.CacheMisses))
			ratio := 0.0
			if st.CacheHits+st.CacheMisses > 0 {
				ratio = float64(st.CacheHits) / float64(st.CacheHits+st.CacheMisses)
			}
			gauge(c.hitRatio, ratio)
			gauge(c.cacheBytes, float64(st.CacheBytes))
			gauge(c.mounted, float64(st.Mounted))
		}
	}
	if c.pools != nil {
		for _, p := range c.pools.Pools() {
			gauge(c.poolSlots, float64(p.Slots), p.Image)
			gauge(c.poolBusy, float64(p.Busy), p.Image)
		}
	}
}

var states = []string{api.StateRunning, api.StatePaused, api.StateExited}

func (c *NodeCollector) collectSandboxes(ch chan<- prometheus.Metric, gauge func(*prometheus.Desc, float64, ...string)) {
	type key struct{ backend, state string }
	counts := map[key]int{}
	for _, b := range c.m.opts.Backends { // every series exists, at 0 when empty
		for _, s := range states {
			counts[key{b, s}] = 0
		}
	}
	var limits float64
	for _, u := range c.sbs.Usage(false) {
		counts[key{c.m.backend(u.Backend), bounded(u.State, states)}]++
		limits += float64(u.MemoryLimitBytes)
	}
	for k, v := range counts {
		gauge(c.sandboxes, float64(v), k.backend, k.state)
	}
	mem := c.memory()
	bm := make(map[float64]uint64, len(memBuckets))
	for i, b := range memBuckets {
		bm[b] = mem.buckets[i]
	}
	ch <- prometheus.MustNewConstHistogram(c.memUsage, mem.n, mem.sum, bm)
	gauge(c.memLimit, limits)
	gauge(c.capacity, float64(c.sbs.Capacity()))
	waiting, size := c.sbs.WarmPool()
	gauge(c.warmWaiting, float64(waiting))
	gauge(c.warmSize, float64(size))
}

// memSample is the memory histogram of one reading of every sandbox.
type memSample struct {
	n       uint64
	sum     float64
	buckets []uint64 // cumulative, by memBuckets
}

func (c *NodeCollector) readMemory() memSample {
	s := memSample{buckets: make([]uint64, len(memBuckets))}
	for _, u := range c.sbs.Usage(true) {
		if u.MemoryBytes < 0 {
			continue
		}
		s.n++
		s.sum += float64(u.MemoryBytes)
		for i, b := range memBuckets {
			if float64(u.MemoryBytes) <= b {
				s.buckets[i]++
			}
		}
	}
	return s
}

// memory returns the memory sample Run keeps fresh; without Run (or before
// its first read), or when the sample is older than c.MemoryMaxAge, it reads
// one now.
func (c *NodeCollector) memory() memSample {
	c.memMu.Lock()
	s, at := c.mem, c.memAt
	c.memMu.Unlock()
	if !at.IsZero() && time.Since(at) <= c.MemoryMaxAge+c.MemoryMaxAge/2 {
		return s
	}
	return c.refresh()
}

func (c *NodeCollector) refresh() memSample {
	s := c.readMemory()
	c.memMu.Lock()
	c.mem, c.memAt = s, time.Now()
	c.memMu.Unlock()
	return s
}

// Run reads every sandbox's memory counter now and every MemoryMaxAge until
// ctx ends, so that scrapes never wait for those reads.
func (c *NodeCollector) Run(ctx context.Context) {
	t := time.NewTicker(c.MemoryMaxAge)
	defer t.Stop()
	for {
		c.refresh()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// collectHost reads the load average and memory of the host from /proc.
func (c *NodeCollector) collectHost(gauge func(*prometheus.Desc, float64, ...string)) {
	if b, err := os.ReadFile(c.procDir + "/loadavg"); err == nil {
		f := strings.Fields(string(b))
		for i, p := range []string{"1m", "5m", "15m"} {
			if i < len(f) {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil {
					gauge(c.load, v, p)
				}
			}
		}
	}
	b, err := os.ReadFile(c.procDir + "/meminfo")
	if err != nil {
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "MemTotal" && name != "MemAvailable") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		if name == "MemTotal" {
			gauge(c.memTotal, kb*1024)
		} else {
			gauge(c.memAvail, kb*1024)
		}
	}
}
