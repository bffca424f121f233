package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/agent"
	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/bench/peer"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The sides `bench create` compares.
const (
	SideAPI = "dsec-api" // POST /v1/sandboxes through the Go client, as the SDKs do
	SideCLI = "dsec-cli" // one `dsec create` process per sandbox, as a user runs it
)

// CompareOptions configure the interleaved create benchmark.
type CompareOptions struct {
	N        int      // creates per side
	Parallel int      // workers within a batch
	Batch    int      // creates per side per turn (A B C A B C ...)
	Image    string   // "" = debian
	Peers    []string // crun, runc, podman (optional: skipped if it cannot run)
	NoCLI    bool     // leave the CLI side out
	Bin      string   // dsec binary ("" = this executable; its CLI side runs the dsec beside dsecd)
	Logger   func(format string, args ...any)
}

// SideResult is one side of the comparison.
type SideResult struct {
	N          int      `json:"n"`
	PerSecond  float64  `json:"creates_per_s"` // creates / time spent in this side's batches
	P50ms      float64  `json:"p50_ms"`
	P99ms      float64  `json:"p99_ms"`
	Maxms      float64  `json:"max_ms"`
	TeardownS  float64  `json:"teardown_s"`
	Failures   int      `json:"failures"`
	FirstError string   `json:"first_error,omitempty"`
	Work       []string `json:"work"` // what one create does on this side
}

// CompareResult is the outcome of `dsec bench create`.
type CompareResult struct {
	N        int    `json:"n"`
	Parallel int    `json:"parallel"`
	Batch    int    `json:"batch"`
	Image    string `json:"image"`
	// Order is the order of the sides within each turn.
	Order []string               `json:"order"`
	Sides map[string]*SideResult `json:"sides"`
	// Skipped names the optional peers (podman) that could not run here, and why.
	Skipped map[string]string `json:"skipped,omitempty"`
	// Ratios: "A/B" is A's creates per second over B's (above 1: A is faster).
	Ratios map[string]float64 `json:"ratios"`
	// The dsec API side's figures and ratios, under the keys earlier versions
	// reported.
	CreatesPerS float64 `json:"creates_per_s"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	RatioVsCrun float64 `json:"ratio_vs_crun,omitempty"`
	RatioVsRunc float64 `json:"ratio_vs_runc,omitempty"`
	Path        string  `json:"path"`
}

// side is one competitor: create(i) and remove(i) for i in [0, N).
type side struct {
	name   string
	work   []string
	create func(ctx context.Context, i int) error
	remove func(ctx context.Context, i int) error
	close  func() error
}

// CreateCompare measures sandbox creation honestly: dsec through its HTTP
// API (a `dsec server` process, the Go client) and through its CLI (a
// `dsec create` process per sandbox) against OCI runtimes doing the same work
// (peer.Work), in turns of Batch creates per side (A B C A B C ...), so that
// every side sees the same machine. Everything is deleted afterwards, each
// side's teardown timed on its own.
func CreateCompare(ctx context.Context, o CompareOptions) (CompareResult, error) {
	o.N, o.Parallel, o.Batch = max(o.N, 1), max(o.Parallel, 1), max(o.Batch, 1)
	if o.Image == "" {
		o.Image = daemon.DefaultImage
	}
	if o.Logger == nil {
		o.Logger = func(string, ...any) {}
	}
	img, err := resolveImage(o.Image)
	if err != nil {
		return CompareResult{}, err
	}
	if len(o.Peers) > 0 && len(img.Lower()) != 1 {
		return CompareResult{}, fmt.Errorf("peers run on one rootfs directory; image %q has %d lower directories", o.Image, len(img.Lower()))
	}
	srv, err := startServer(ctx, o.Bin, "", "--log-level", "warn")
	if err != nil {
		return CompareResult{}, err
	}
	defer srv.stop()

	sides := []*side{apiSide(srv, o.N)}
	if !o.NoCLI {
		sides = append(sides, cliSide(srv, o.N))
	}
	defer func() {
		for _, s := range sides {
			if s.close != nil {
				_ = s.close()
			}
		}
	}()
	skipped := map[string]string{}
	work := peer.Work{Rootfs: img.Lower()[0], MemoryBytes: agent.DefaultMemory, DiskBytes: agent.DefaultDisk,
		CPU: agent.DefaultCPU, PidsMax: agent.DefaultPidsMax}
	for _, name := range o.Peers {
		if name == "podman" { // optional: skipped, and said so, where it cannot run
			pm, err := peer.FindPodman(work)
			if err != nil {
				skipped[name] = err.Error()
				continue
			}
			sides = append(sides, &side{name: name, work: pm.Describe(), create: pm.Create, remove: pm.Delete, close: pm.Close})
			continue
		}
		rt, err := peer.Find(name)
		if err != nil {
			return CompareResult{}, err
		}
		ps, err := rt.Open(work, o.Parallel)
		if err != nil {
			return CompareResult{}, fmt.Errorf("%s: %w", name, err)
		}
		sides = append(sides, &side{name: name, work: work.Describe(rt, ps.Notes),
			create: ps.Create, remove: ps.Delete, close: ps.Close})
	}

	res := CompareResult{N: o.N, Parallel: o.Parallel, Batch: o.Batch, Image: o.Image,
		Sides: map[string]*SideResult{}, Ratios: map[string]float64{}, Skipped: skipped,
		Path: "dsec: HTTP API of a dsec server process and its CLI; peers: the same work (see each side's work), interleaved in turns"}
	lat := map[string][]time.Duration{}
	spent := map[string]time.Duration{}
	for _, s := range sides {
		res.Order = append(res.Order, s.name)
		res.Sides[s.name] = &SideResult{N: o.N, Work: s.work}
	}
	for from := 0; from < o.N && ctx.Err() == nil; from += o.Batch {
		k := min(o.Batch, o.N-from)
		for _, s := range sides {
			r := res.Sides[s.name]
			l, wall, failures, first := runLoad(ctx, k, o.Parallel, false, func(_, j int) error {
				return s.create(ctx, from+j)
			})
			lat[s.name] = append(lat[s.name], l...)
			spent[s.name] += wall
			r.Failures += failures
			if first != nil && r.FirstError == "" {
				r.FirstError = first.Error()
			}
		}
		o.Logger("%d of %d creates per side done", from+k, o.N)
	}
	// Teardown, side by side.
	dctx := context.WithoutCancel(ctx)
	for _, s := range sides {
		t := time.Now()
		_, _, failures, first := runLoad(dctx, o.N, o.Parallel, false, func(_, i int) error { return s.remove(dctx, i) })
		res.Sides[s.name].TeardownS = round(time.Since(t).Seconds(), 3)
		if failures > 0 && res.Sides[s.name].FirstError == "" {
			res.Sides[s.name].FirstError = "teardown: " + first.Error()
		}
	}
	for name, r := range res.Sides {
		ls := summarize(lat[name])
		r.P50ms, r.P99ms, r.Maxms = ls.P50ms, ls.P99ms, ls.Maxms
		if spent[name] > 0 {
			r.PerSecond = round(float64(len(lat[name])-r.Failures)/spent[name].Seconds(), 1)
		}
	}
	for _, a := range []string{SideAPI, SideCLI} {
		for _, b := range o.Peers {
			if ra, rb := res.Sides[a], res.Sides[b]; ra != nil && rb != nil && rb.PerSecond > 0 {
				res.Ratios[a+"/"+b] = round(ra.PerSecond/rb.PerSecond, 2)
			}
		}
	}
	api := res.Sides[SideAPI]
	res.CreatesPerS, res.P50ms, res.P99ms = api.PerSecond, api.P50ms, api.P99ms
	res.RatioVsCrun, res.RatioVsRunc = res.Ratios[SideAPI+"/crun"], res.Ratios[SideAPI+"/runc"]
	var errs []error
	for _, s := range sides {
		if s.close != nil {
			errs = append(errs, s.close())
			s.close = nil
		}
	}
	return res, errors.Join(append(errs, ctx.Err())...)
}

// dsecWork is what a dsec create does (both dsec sides; the CLI adds its own
// process and a new connection per sandbox).
var dsecWork = []string{
	"HTTP POST /v1/sandboxes (JSON) to a dsec server process on loopback; the server answers once the sandbox runs",
	"server: auth, request ID, admission, trajectory decorator, sandbox record written to its data dir",
	"container driver: tmpfs writable layer (1 GiB) + overlay root over the image's lower directory",
	"cgroups in cpu,cpuacct, freezer, memory and pids (memory 512 MiB, cpu 1 core, pids 1024; devices through the node's shared devices cgroup), dsec's seccomp profile, capabilities dropped, no_new_privs",
	"pid/ipc/uts/mount/net/cgroup namespaces (loopback only), dsec-init as pid 1 answering on a unix socket",
}

// ids records the sandbox IDs a dsec side created, by index.
type ids struct {
	mu sync.Mutex
	m  map[int]string
}

func (s *ids) set(i int, id string) { s.mu.Lock(); s.m[i] = id; s.mu.Unlock() }
func (s *ids) get(i int) string     { s.mu.Lock(); defer s.mu.Unlock(); return s.m[i] }

func apiSide(srv *serverProc, n int) *side {
	cl := srv.Client()
	made := &ids{m: make(map[int]string, n)}
	return &side{name: SideAPI,
		work: append([]string{"Go client (pkg/client), one keep-alive connection per worker"}, dsecWork...),
		create: func(ctx context.Context, i int) error {
			sb, err := cl.Create(ctx, api.CreateSandboxRequest{})
			if err == nil {
				made.set(i, sb.ID)
			}
			return err
		},
		remove: func(ctx context.Context, i int) error {
			if id := made.get(i); id != "" {
				return cl.Delete(ctx, id)
			}
			return nil
		}}
}

func cliSide(srv *serverProc, n int) *side {
	made := &ids{m: make(map[int]string, n)}
	env := append(os.Environ(), "DSEC_ADDR="+srv.Addr, "DSEC_TOKEN="+srv.Token)
	run := func(ctx context.Context, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, clientBinary(srv.Bin), args...)
		cmd.Env = env
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("dsec %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return strings.TrimSpace(string(out)), err
	}
	return &side{name: SideCLI,
		work: append([]string{"`dsec create` process per sandbox (new HTTP connection each), `dsec rm` for the teardown"}, dsecWork...),
		create: func(ctx context.Context, i int) error {
			id, err := run(ctx, "create")
			if err == nil {
				made.set(i, id)
			}
			return err
		},
		remove: func(ctx context.Context, i int) error {
			if id := made.get(i); id != "" {
				_, err := run(ctx, "rm", id)
				return err
			}
			return nil
		}}
}
