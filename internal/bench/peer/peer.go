// Package peer runs OCI runtimes (crun, runc) as comparison peers in the same
// benchmark run, on the same root file system, as dsec's own sandboxes.
//
// Each peer container gets a minimal OCI runtime spec generated here (no
// dependency on the runtime-spec module): process "sleep infinity" as an idle
// init (parity with a fresh dsec sandbox), a read-only root, new pid, ipc,
// uts, mount and network namespaces, /proc, /dev (tmpfs), /dev/pts, /dev/shm
// and a read-only /sys, and the default masked and read-only paths. No cgroup
// resources are set.
//
// What is timed per container is "RUNTIME run --detach" (create and start, up
// to the point the runtime returns with the init running); the teardown
// ("RUNTIME delete --force" of all N containers once all are up) is timed
// separately.
//
// Host quirk: crun 1.8.1 refuses a hybrid cgroup v1/v2 layout ("cgroups in
// hybrid mode not supported"), so crun runs with --cgroup-manager=disabled;
// runc works with its default cgroupfs manager. See Runtime.Note.
package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Runtime is an OCI runtime binary used as a benchmark peer.
type Runtime struct {
	Name string // "crun" or "runc"
	Path string // absolute path of the binary
	// ExtraArgs are global options placed before the subcommand on every
	// invocation (e.g. --cgroup-manager=disabled for crun).
	ExtraArgs []string
}

// Known peer names, in the order benchmarks list them.
var Known = []string{"crun", "runc"}

// Find looks up the named OCI runtime (crun or runc) on PATH and returns it
// with the options it needs on this kind of host.
func Find(name string) (Runtime, error) {
	var extra []string
	switch name {
	case "crun":
		extra = []string{"--cgroup-manager=disabled"}
	case "runc":
		// Default cgroupfs manager; say so explicitly.
		extra = []string{"--systemd-cgroup=false"}
	default:
		return Runtime{}, fmt.Errorf("peer: unknown OCI runtime %q (known: %s)", name, strings.Join(Known, ", "))
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return Runtime{}, fmt.Errorf("peer: OCI runtime %q not found on PATH (install the %s package; scripts/setup.sh does): %w", name, name, err)
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return Runtime{Name: name, Path: p, ExtraArgs: extra}, nil
}

func (b *bench) note() string {
	if b.hideCgroup2 {
		return b.r.Note() + "; run from a private mount namespace without " + unifiedCgroup + " (see internal/bench/peer/hybrid.go)"
	}
	return b.r.Note()
}

// Note explains how this runtime is run, for benchmark reports.
func (r Runtime) Note() string {
	switch r.Name {
	case "crun":
		return "crun run with --cgroup-manager=disabled, no cgroup per container (crun 1.8.1 rejects hybrid cgroup hosts whose cgroup2 hierarchy has controllers: \"cgroups in hybrid mode not supported\")"
	case "runc":
		return "runc run with its default cgroupfs manager (--systemd-cgroup=false); one cgroup per container, no limits set"
	}
	if len(r.ExtraArgs) > 0 {
		return r.Name + " run with " + strings.Join(r.ExtraArgs, " ")
	}
	return r.Name + " run with default options"
}

// Result summarises one Bench run.
type Result struct {
	N               int     `json:"n"`             // containers created (and started)
	Seconds         float64 `json:"create_s"`      // wall time to create all N
	PerSecond       float64 `json:"creates_per_s"` // N / Seconds
	P50ms           float64 `json:"p50_ms"`        // per-container create+start latency
	P99ms           float64 `json:"p99_ms"`
	TeardownSeconds float64 `json:"teardown_s"` // wall time to delete all N
	Note            string  `json:"note"`       // how the runtime was run (Runtime.Note)
}

// Bench creates and starts n containers of "sleep infinity" on rootfs with
// parallel workers, waits until all are up, then deletes them all. Everything
// it creates (containers, state and bundle directories) is removed before it
// returns, also on error.
func (r Runtime) Bench(ctx context.Context, rootfs string, n, parallel int) (res Result, err error) {
	if n <= 0 {
		return Result{}, fmt.Errorf("peer: n must be positive, got %d", n)
	}
	if parallel <= 0 {
		parallel = 1
	}
	if parallel > n {
		parallel = n
	}
	if r.Path == "" {
		return Result{}, fmt.Errorf("peer: runtime %q has no path (use Find)", r.Name)
	}
	rootfs, err = filepath.Abs(rootfs)
	if err != nil {
		return Result{}, err
	}
	if fi, err := os.Stat(rootfs); err != nil {
		return Result{}, fmt.Errorf("peer: rootfs: %w", err)
	} else if !fi.IsDir() {
		return Result{}, fmt.Errorf("peer: rootfs %s is not a directory", rootfs)
	}

	work, err := os.MkdirTemp("", "dsec-peer-"+r.Name+"-")
	if err != nil {
		return Result{}, err
	}
	b := &bench{
		r:           r,
		work:        work,
		state:       filepath.Join(work, "state"),
		bundle:      filepath.Join(work, "bundle"),
		hideCgroup2: needsHybridWorkaround(r),
	}
	defer func() {
		if cerr := b.cleanup(); cerr != nil && err == nil {
			err = cerr
		}
		if rerr := os.RemoveAll(work); rerr != nil && err == nil {
			err = fmt.Errorf("peer: remove %s: %w", work, rerr)
		}
	}()
	if err := os.Mkdir(b.state, 0o700); err != nil {
		return Result{}, err
	}
	if err := os.Mkdir(b.bundle, 0o755); err != nil {
		return Result{}, err
	}
	cfg, err := json.MarshalIndent(Spec(rootfs, "dsec-peer"), "", "  ")
	if err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(filepath.Join(b.bundle, "config.json"), cfg, 0o644); err != nil {
		return Result{}, err
	}

	// The ID prefix is unique per run so concurrent runs never collide.
	prefix := fmt.Sprintf("dsec-peer-%s-%d-%d", r.Name, os.Getpid(), time.Now().UnixNano()%1e9)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + "-" + strconv.Itoa(i)
	}

	// Create phase.
	lat := make([]time.Duration, n)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		firstErr error
		errOnce  sync.Once
	)
	start := time.Now()
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	b.parallel(cctx, n, parallel, func(i int) {
		if cctx.Err() != nil {
			return
		}
		b.attempted(ids[i])
		t := time.Now()
		// Not cctx: after a failure elsewhere, creates in flight finish
		// (and get deleted) rather than being killed half-way, which can
		// leave runtime debris (runc cgroups) behind.
		if err := b.run(ctx, "run", "--detach", "--bundle", b.bundle, ids[i]); err != nil {
			fail(fmt.Errorf("peer: %s run %s: %w", r.Name, ids[i], err))
			return
		}
		lat[i] = time.Since(t)
	}, fail)
	created := time.Since(start)
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return Result{}, firstErr
	}

	// Teardown phase: all N are up; delete them all.
	start = time.Now()
	var delErr error
	var delOnce sync.Once
	delFail := func(err error) { delOnce.Do(func() { delErr = err }) }
	dctx := context.WithoutCancel(ctx)
	b.parallel(dctx, n, parallel, func(i int) {
		if err := b.run(dctx, "delete", "--force", ids[i]); err != nil {
			delFail(fmt.Errorf("peer: %s delete %s: %w", r.Name, ids[i], err))
			return
		}
		b.deleted(ids[i])
	}, delFail)
	teardown := time.Since(start)
	if delErr != nil {
		return Result{}, delErr
	}

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return Result{
		N:               n,
		Seconds:         created.Seconds(),
		PerSecond:       float64(n) / created.Seconds(),
		P50ms:           ms(percentile(lat, 50)),
		P99ms:           ms(percentile(lat, 99)),
		TeardownSeconds: teardown.Seconds(),
		Note:            b.note(),
	}, nil
}

type bench struct {
	r      Runtime
	work   string // holds state, bundle and stderr files
	state  string // --root
	bundle string
	// hideCgroup2: run the runtime in a mount namespace without the
	// cgroup2 hierarchy (crun on a hybrid-cgroup host; see hybrid.go).
	hideCgroup2 bool

	mu   sync.Mutex
	live map[string]bool // IDs that may exist in state
}

func (b *bench) attempted(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.live == nil {
		b.live = map[string]bool{}
	}
	b.live[id] = true
}

func (b *bench) deleted(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.live, id)
}

// parallel runs f(0..n-1) on w workers, stopping early once ctx is done.
// With the hybrid-cgroup workaround on, each worker first moves its own OS
// thread into a mount namespace without the cgroup2 hierarchy (see
// hybrid.go); a worker that cannot do so reports the error through fail.
func (b *bench) parallel(ctx context.Context, n, w int, f func(i int), fail func(error)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.hideCgroup2 {
				// Never unlocked: the thread is discarded when this
				// goroutine exits.
				if err := hideUnifiedCgroup(); err != nil {
					fail(err)
					for range next {
					}
					return
				}
			}
			for i := range next {
				f(i)
			}
		}()
	}
	defer func() { close(next); wg.Wait() }()
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			return
		}
	}
}

// run invokes the runtime with its global options; on failure the error
// carries the runtime's stderr.
func (b *bench) run(ctx context.Context, args ...string) error {
	full := append([]string{"--root", b.state}, b.r.ExtraArgs...)
	full = append(full, args...)
	// Runtime stderr goes to a file, never a pipe: with --detach the
	// container inherits the runtime's stdio, and a pipe would keep
	// exec.Cmd.Wait waiting until the container exits.
	errf, err := os.CreateTemp(b.work, "stderr-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	cmd := exec.CommandContext(ctx, b.r.Path, full...)
	cmd.Stdin = nil  // /dev/null
	cmd.Stdout = nil // /dev/null
	cmd.Stderr = errf
	cmd.Dir = b.bundle
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(errf.Name())
		if s := strings.TrimSpace(string(msg)); s != "" {
			return fmt.Errorf("%w: %s", err, s)
		}
		return err
	}
	return nil
}

// cleanup force-deletes every container that may still exist, including ones
// whose creation was interrupted, then any the runtime still lists.
func (b *bench) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b.mu.Lock()
	ids := make([]string, 0, len(b.live))
	for id := range b.live {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		// Errors are expected for IDs whose create never got far.
		_ = b.run(ctx, "delete", "--force", id)
		b.deleted(id)
	}
	if _, err := os.Stat(b.state); err != nil {
		return nil
	}
	left, err := b.list(ctx)
	if err != nil {
		return fmt.Errorf("peer: %s list after cleanup: %w", b.r.Name, err)
	}
	var errs []error
	for _, id := range left {
		if err := b.run(ctx, "delete", "--force", id); err != nil {
			errs = append(errs, fmt.Errorf("peer: %s delete %s: %w", b.r.Name, id, err))
		}
	}
	for _, id := range ids {
		if err := removeCgroups(id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the cgroups named id that a runtime interrupted
// half-way through a create may leave behind (runc's default cgroup of a
// container is /<id> in every hierarchy), killing any process still in them.
// Only cgroups named after this run's unique IDs are touched.
func removeCgroups(id string) error {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", id))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", id))
	var errs []error
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		var err error
		for try := 0; try < 50; try++ {
			if procs, rerr := os.ReadFile(filepath.Join(d, "cgroup.procs")); rerr == nil {
				for _, f := range strings.Fields(string(procs)) {
					if pid, perr := strconv.Atoi(f); perr == nil && pid > 1 {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			if err = os.Remove(d); err == nil || os.IsNotExist(err) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("peer: remove leftover cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// list returns the IDs of the containers in the state directory.
func (b *bench) list(ctx context.Context) ([]string, error) {
	return List(ctx, b.r, b.state)
}

// List returns the IDs of the containers r knows in state directory root.
func List(ctx context.Context, r Runtime, root string) ([]string, error) {
	args := append([]string{"--root", root}, r.ExtraArgs...)
	args = append(args, "list", "--quiet")
	out, err := exec.CommandContext(ctx, r.Path, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// Nearest rank.
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	k = max(0, min(k, len(sorted)-1))
	return sorted[k]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
