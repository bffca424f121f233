package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/pkg/api"
	"github.com/dsec-dev/dsec/pkg/client"
)

// TrajResult is the outcome of `dsec bench traj`.
type TrajResult struct {
	N int `json:"n"`
	// ExecP50ms and TaggedExecP50ms are exec `true` without and with trajectory
	// tags (same sandbox, interleaved); LogOverheadP50ms is their difference.
	ExecP50ms        float64 `json:"exec_p50_ms"`
	TaggedExecP50ms  float64 `json:"traj_exec_p50_ms"`
	LogOverheadP50ms float64 `json:"log_overhead_p50_ms"`
	// FdatasyncP50ms is a 1 KiB overwrite and fdatasync of a file in the data
	// dir, spaced like the execs: the disk's cost of the one fsync a step waits for.
	FdatasyncP50ms float64 `json:"disk_fdatasync_p50_ms"`
	// ReplayP50ms is the latency of re-issuing a logged step (answered from the log).
	ReplayP50ms float64 `json:"replay_p50_ms"`
	ReplayP99ms float64 `json:"replay_p99_ms"`
	// StepsPerS is logged exec steps per second across Trajectories concurrent
	// trajectories on Sandboxes sandboxes, end to end through the API.
	StepsPerS    float64 `json:"steps_per_s"`
	Trajectories int     `json:"trajectories"`
	Sandboxes    int     `json:"sandboxes"`
	// Store is the node's default trajectory store, which the API figures use.
	Store string `json:"store"`
	// LogOnly*: Begin+Finish on a store directly, 100 goroutines, each one new
	// trajectory step: the default store (LogOnlyStepsPerS), then bbolt
	// (`--traj-store bolt`) for comparison.
	LogOnlyStepsPerS     float64 `json:"log_only_steps_per_s"`
	LogOnlyBoltStepsPerS float64 `json:"log_only_bolt_steps_per_s"`
	// LogOnlyP50ms is one Begin+Finish with no concurrency on the default store;
	// LogOnlyBoltP50ms on bbolt.
	LogOnlyP50ms     float64 `json:"log_only_p50_ms"`
	LogOnlyBoltP50ms float64 `json:"log_only_bolt_p50_ms"`
	// LogOnlySlowDiskStepsPerS is LogOnlyStepsPerS with every WAL fsync
	// made SlowDiskFsyncMs longer (a simulated slow disk; 0: not measured).
	LogOnlySlowDiskStepsPerS float64 `json:"log_only_slow_disk_steps_per_s,omitempty"`
	SlowDiskFsyncMs          float64 `json:"slow_disk_fsync_ms,omitempty"`
	Failures                 int     `json:"failures"`
	FirstError               string  `json:"first_error,omitempty"`
}

// TrajOptions select parts of `dsec bench traj`.
type TrajOptions struct {
	// LogOnly measures the store alone (no node, no sandboxes), in a
	// temporary directory under Dir (default: the system's).
	LogOnly bool
	Dir     string
	// SlowFsync, when positive, adds a log-only measurement with every WAL
	// fsync made that much longer (PebbleOptions.SyncDelay).
	SlowFsync time.Duration
}

// Traj measures the trajectory log: its overhead on exec, replay latency, and
// logged steps per second end to end and on the store alone.
func Traj(ctx context.Context, o Options, to TrajOptions) (TrajResult, error) {
	o.defaults()
	if to.LogOnly {
		res := TrajResult{Store: trajectory.KindPebble, Trajectories: 100}
		return res, logOnlyStores(ctx, to.Dir, to.SlowFsync, &res)
	}
	d, cleanup, err := openNode(ctx, o)
	if err != nil {
		return TrajResult{}, err
	}
	defer cleanup()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return TrajResult{}, err
	}
	go func() { _ = d.Serve(l) }()
	cl := client.New("http://"+l.Addr().String(), d.Token)
	res := TrajResult{N: o.N, Trajectories: 100, Sandboxes: 10, Store: trajectory.KindPebble}
	fail := func(err error) {
		res.Failures++
		if res.FirstError == "" {
			res.FirstError = err.Error()
		}
	}
	trueReq := api.ExecRequest{Cmd: []string{"true"}}
	sb, err := cl.Create(ctx, api.CreateSandboxRequest{Image: o.Image})
	if err != nil {
		return res, fmt.Errorf("create: %w", err)
	}
	for range 20 { // warm up
		if _, err := cl.Exec(ctx, sb.ID, trueReq); err != nil {
			return res, fmt.Errorf("warm-up exec: %w", err)
		}
	}
	// Overhead: interleave untagged and tagged execs in the same sandbox.
	plain := make([]time.Duration, 0, o.N)
	tagged := make([]time.Duration, 0, o.N)
	for i := 0; i < o.N && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if _, err := cl.Exec(ctx, sb.ID, trueReq); err != nil {
			fail(err)
		}
		plain = append(plain, time.Since(t0))
		t0 = time.Now()
		if _, err := cl.Exec(client.WithTrajectory(ctx, "bench-overhead", i+1), sb.ID, trueReq); err != nil {
			fail(err)
		}
		tagged = append(tagged, time.Since(t0))
	}
	res.ExecP50ms, res.TaggedExecP50ms = summarize(plain).P50ms, summarize(tagged).P50ms
	res.LogOverheadP50ms = round(res.TaggedExecP50ms-res.ExecP50ms, 3)
	if res.FdatasyncP50ms, err = fdatasyncP50(filepath.Dir(trajPath(d)), time.Duration(res.ExecP50ms*float64(time.Millisecond))); err != nil {
		return res, err
	}
	// Replay: re-issue every logged step.
	replay := make([]time.Duration, 0, o.N)
	for i := 0; i < o.N && ctx.Err() == nil; i++ {
		t0 := time.Now()
		r, err := cl.Exec(client.WithTrajectory(ctx, "bench-overhead", i+1), sb.ID, trueReq)
		replay = append(replay, time.Since(t0))
		if err == nil && !r.Replayed {
			err = fmt.Errorf("step %d was not replayed", i+1)
		}
		if err != nil {
			fail(err)
		}
	}
	ls := summarize(replay)
	res.ReplayP50ms, res.ReplayP99ms = ls.P50ms, ls.P99ms

	// Throughput end to end: 100 trajectories on 10 sandboxes.
	ids := []string{sb.ID}
	for len(ids) < res.Sandboxes {
		s, err := cl.Create(ctx, api.CreateSandboxRequest{Image: o.Image})
		if err != nil {
			return res, fmt.Errorf("create: %w", err)
		}
		ids = append(ids, s.ID)
	}
	const stepsEach = 20
	t0 := time.Now()
	ran, errs := runSteps(res.Trajectories, stepsEach, func(g, k int) error {
		_, err := cl.Exec(client.WithTrajectory(ctx, fmt.Sprintf("bench-tput-%d", g), k), ids[g%len(ids)], trueReq)
		return err
	})
	for _, err := range errs {
		fail(err)
	}
	res.StepsPerS = round(float64(ran)/time.Since(t0).Seconds(), 1)

	// The log alone, on the same file system as the node's data dir.
	if err := logOnlyStores(ctx, filepath.Dir(trajPath(d)), to.SlowFsync, &res); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// logOnlyStores measures the stores alone in a temporary directory under
// parent: Pebble, bbolt, and Pebble on a simulated slow disk when slow > 0.
func logOnlyStores(ctx context.Context, parent string, slow time.Duration, res *TrajResult) error {
	dir, err := os.MkdirTemp(parent, "trajbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var slowP50 float64
	stores := []struct {
		name      string
		open      func(path string) (trajectory.Store, error)
		rate, p50 *float64
	}{
		{"pebble", func(p string) (trajectory.Store, error) { return trajectory.OpenPebble(p, trajectory.PebbleOptions{}) },
			&res.LogOnlyStepsPerS, &res.LogOnlyP50ms},
		{"bolt", func(p string) (trajectory.Store, error) { return trajectory.OpenBolt(p) },
			&res.LogOnlyBoltStepsPerS, &res.LogOnlyBoltP50ms},
	}
	if slow > 0 {
		res.SlowDiskFsyncMs = ms(slow)
		stores = append(stores, struct {
			name      string
			open      func(path string) (trajectory.Store, error)
			rate, p50 *float64
		}{"pebble-slow-disk", func(p string) (trajectory.Store, error) {
			return trajectory.OpenPebble(p, trajectory.PebbleOptions{SyncDelay: slow})
		}, &res.LogOnlySlowDiskStepsPerS, &slowP50})
	}
	for _, m := range stores {
		st, err := m.open(filepath.Join(dir, m.name))
		if err != nil {
			return err
		}
		rate, p50, err := logOnly(ctx, st)
		if cerr := st.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		*m.rate, *m.p50 = rate, p50
	}
	return nil
}

// trajPath is where the node keeps its trajectory log.
func trajPath(d *daemon.Daemon) string {
	if p, ok := d.Trajectories.(interface{ Path() string }); ok {
		return p.Path()
	}
	return filepath.Join(os.TempDir(), "trajectories")
}

// fdatasyncP50 is the p50 of 100 1 KiB overwrites+fdatasyncs of a preallocated
// file in dir, gap apart.
func fdatasyncP50(dir string, gap time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	buf := make([]byte, 1024)
	lat := make([]time.Duration, 0, 100)
	for i := range 100 {
		time.Sleep(gap)
		if _, err := f.WriteAt(buf, int64(i)*1024); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	return summarize(lat).P50ms, nil
}

// logOnly runs Begin+Finish of new steps from 100 goroutines for ~2 s and returns
// steps/s, then the p50 of 200 sequential Begin+Finish.
func logOnly(ctx context.Context, st trajectory.Store) (float64, float64, error) {
	res, err := trajectory.TypedResult(trajectory.Outcome{Exec: &api.ExecResult{DurationMs: 1.2}})
	if err != nil {
		return 0, 0, err
	}
	step := func(traj string, n int) error {
		fp, args, _ := trajectory.Fingerprint(trajectory.OpExec, trajectory.NormalizeExec(trajectory.OpExec, api.ExecRequest{Cmd: []string{"true"}}))
		if _, err := st.Begin(ctx, trajectory.BeginRequest{Trajectory: traj, N: n, Op: trajectory.OpExec,
			Fingerprint: fp, Args: args, SandboxID: "sb"}); err != nil {
			return err
		}
		return st.Finish(ctx, traj, n, res, time.Now())
	}
	var total atomic.Int64 // steps that finished: never one that failed or did not run
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	t0 := time.Now()
	for g := range 100 {
		wg.Go(func() {
			for n := 1; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				if err := step(fmt.Sprintf("log-%d", g), n); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	rate := round(float64(total.Load())/time.Since(t0).Seconds(), 1)
	if first != nil {
		return 0, 0, first
	}
	lat := make([]time.Duration, 0, 200)
	for n := 1; n <= 200; n++ {
		s := time.Now()
		if err := step("log-seq", n); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(s))
	}
	return rate, summarize(lat).P50ms, nil
}
