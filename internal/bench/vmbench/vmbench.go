// Package vmbench is `dsec bench vm`: the microvm backend's create → first
// exec answered against the floor (the same QEMU command line and kernel
// booting to an init that prints and powers off), interleaved in one run,
// for sandboxes restored from their launch's snapshot and for booted ones;
// exec `true` and pause/resume latency in a running VM; idle host memory
// per VM with and without free page reporting, and how many idle VMs fit.
package vmbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/vm/microvm"
)

// Options configure the run.
type Options struct {
	N         int    // create rounds (each also boots the floor once)
	Image     string // image directory name under ImagesDir (default busybox)
	ImagesDir string // default /var/lib/dsec/images
	MemoryMiB int64  // guest memory (default 512)
	IdleVMs   int    // VMs per idle-memory phase (default 3, at most 4)
	IdleWait  time.Duration
	// Trace records each round's boot timeline (host steps and the guest
	// agent's, microvm.Config.Trace) in Result.Traces. It adds dsec.trace=1
	// to the kernel command line of the sandboxes and of the floor alike.
	Trace  bool
	Logger *slog.Logger
}

// Stat is a latency distribution in milliseconds.
type Stat struct {
	N     int     `json:"n"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
}

// Result is the benchmark's report.
type Result struct {
	Accel       string `json:"accel"`
	AccelReason string `json:"accel_reason"`
	Floor       Stat   `json:"floor_boot"`
	// CreateExec: sandboxes of a launch that has a snapshot (every one
	// after the first), restored from it.
	CreateExec Stat    `json:"create_to_first_exec"`
	RatioP50   float64 `json:"create_vs_floor_p50"`
	RatioP99   float64 `json:"create_vs_floor_p99"`
	Restored   int     `json:"restored"` // rounds whose create was a restore
	// BootExec: the same creates with snapshots off (every sandbox boots;
	// what the first sandbox of a launch costs).
	BootExec     Stat    `json:"boot_create_to_first_exec"`
	BootRatioP50 float64 `json:"boot_vs_floor_p50"`
	BootRatioP99 float64 `json:"boot_vs_floor_p99"`
	// UnconfinedExec: the same restored creates with QEMU unconfined (as
	// root, no -sandbox, no namespaces of its own: microvm.Config.Unconfined),
	// interleaved with the confined ones; ConfinedRatioP50 is CreateExec's
	// p50 over it (what confining QEMU costs a create).
	UnconfinedExec   Stat    `json:"unconfined_create_to_first_exec"`
	ConfinedRatioP50 float64 `json:"confined_vs_unconfined_p50"`
	// SnapshotMs is how long taking the launch's snapshot took (a VM boot,
	// settling, saving; in the background of the first create), SnapshotMiB
	// its size.
	SnapshotMs    float64 `json:"snapshot_ms"`
	SnapshotMiB   float64 `json:"snapshot_mib"`
	ExecTrue      Stat    `json:"exec_true"`
	Pause         Stat    `json:"pause"`
	Resume        Stat    `json:"resume"`
	GuestMemMiB   int64   `json:"guest_memory_mib"`
	IdleRSSFPRMiB float64 `json:"idle_rss_free_page_reporting_mib"`
	IdleRSSNoMiB  float64 `json:"idle_rss_no_free_page_reporting_mib"`
	// PSS shares the kernel image QEMU maps and the layer pages every VM
	// reads between them: what one more VM costs.
	IdlePSSFPRMiB float64 `json:"idle_pss_free_page_reporting_mib"`
	IdlePSSNoMiB  float64 `json:"idle_pss_no_free_page_reporting_mib"`
	// Restored VMs idle (free page reporting on): the other idle figures
	// are of booted ones.
	IdleRSSRestoredMiB float64 `json:"idle_rss_restored_mib"`
	IdlePSSRestoredMiB float64 `json:"idle_pss_restored_mib"`
	FitIn24GiB         int     `json:"idle_vms_fit_24gib"`
	FitIn24GiBNo       int     `json:"idle_vms_fit_24gib_without_fpr"`
	// Traces (Options.Trace): per round, the host's boot steps and the
	// guest's timeline of its boot and first exec, in ms.
	Traces []string `json:"traces,omitempty"`
}

func stat(d []time.Duration) Stat {
	if len(d) == 0 {
		return Stat{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(p*float64(len(s))+0.5) - 1
		i = max(0, min(i, len(s)-1))
		return float64(s[i].Microseconds()) / 1000
	}
	return Stat{N: len(s), P50ms: q(0.5), P99ms: q(0.99)}
}

// Run runs the benchmark in a scratch state directory (removed at the end).
func Run(ctx context.Context, o Options) (Result, error) {
	if o.N <= 0 {
		o.N = 10
	}
	if o.Image == "" {
		o.Image = "busybox"
	}
	if o.ImagesDir == "" {
		o.ImagesDir = "/var/lib/dsec/images"
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 512
	}
	if o.IdleVMs <= 0 {
		o.IdleVMs = 3
	}
	o.IdleVMs = min(o.IdleVMs, 4)
	if o.IdleWait == 0 {
		o.IdleWait = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir, err := os.MkdirTemp("", "dsec-bench-vm-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	trace := 0
	if o.Trace {
		trace = 1
	}
	d, err := microvm.New(microvm.Config{StateDir: dir, Logger: o.Logger, Trace: trace})
	if err != nil {
		return Result{}, err
	}
	a := d.Accel(ctx)
	res := Result{Accel: a.Accel, AccelReason: a.Reason, GuestMemMiB: o.MemoryMiB}
	layers := []driver.Layer{{Kind: driver.LayerDir, Path: filepath.Join(o.ImagesDir, o.Image, "rootfs")}}
	spec := func(i int, tag string) driver.Spec {
		return driver.Spec{ID: fmt.Sprintf("bench-%s-%d", tag, i), Layers: layers, CPU: 1, Memory: o.MemoryMiB << 20, Disk: 256 << 20}
	}
	boot, err := microvm.New(microvm.Config{StateDir: dir, Logger: o.Logger, Trace: trace, NoSnapshots: true})
	if err != nil {
		return Result{}, err
	}
	openDir := filepath.Join(dir, "unconfined")
	open, err := microvm.New(microvm.Config{StateDir: openDir, Logger: o.Logger, Trace: trace, Unconfined: true})
	if err != nil {
		return Result{}, err
	}
	if inst, err := open.Start(ctx, spec(0, "warm-u")); err != nil {
		return res, err
	} else {
		_ = inst.Destroy(ctx)
	}
	open.WaitSnapshots()
	// Warm the layer cache (mkfs.erofs) outside the timed runs, and take
	// the launch's snapshot (the first create's background work).
	t0 := time.Now()
	if inst, err := d.Start(ctx, spec(0, "warm")); err != nil {
		return res, err
	} else {
		_ = inst.Destroy(ctx)
	}
	d.WaitSnapshots()
	res.SnapshotMs = float64(time.Since(t0).Microseconds()) / 1000
	if m, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*.snap")); len(m) == 1 {
		if fi, err := os.Stat(m[0]); err == nil {
			res.SnapshotMiB = float64(fi.Size()) / (1 << 20)
		}
	}
	var floor, create, bootCreate, execT, pause, resume, unconfined []time.Duration
	for i := 0; i < o.N; i++ {
		// A booted create (snapshots off), then the floor, then a restored
		// create: each round interleaves the three.
		bt, err := createExec(ctx, boot, spec(i, "b"), o, &res, i, "boot")
		if err != nil {
			return res, err
		}
		bootCreate = append(bootCreate, bt)
		f, out, err := d.BootFloorOutput(ctx, o.MemoryMiB)
		if err != nil {
			return res, err
		}
		if o.Trace {
			res.Traces = append(res.Traces, fmt.Sprintf("round %d floor: %.1f ms, %s", i,
				float64(f.Microseconds())/1000, strings.TrimSpace(out)))
		}
		floor = append(floor, f)
		t0 := time.Now()
		inst, err := d.Start(ctx, spec(i, "c"))
		if err != nil {
			return res, err
		}
		if err := execTrue(ctx, inst); err != nil {
			_ = inst.Destroy(ctx)
			return res, err
		}
		create = append(create, time.Since(t0))
		if r, ok := inst.(interface{ Restored() bool }); ok && r.Restored() {
			res.Restored++
		}
		for j := 0; j < 20; j++ {
			t := time.Now()
			if err := execTrue(ctx, inst); err != nil {
				_ = inst.Destroy(ctx)
				return res, err
			}
			execT = append(execT, time.Since(t))
		}
		p := inst.(driver.Pauser)
		for j := 0; j < 3; j++ {
			t := time.Now()
			if err := p.Pause(ctx); err != nil {
				_ = inst.Destroy(ctx)
				return res, err
			}
			pause = append(pause, time.Since(t))
			t = time.Now()
			if err := p.Resume(ctx); err != nil {
				_ = inst.Destroy(ctx)
				return res, err
			}
			resume = append(resume, time.Since(t))
		}
		addTrace(&res, o, inst, i, "restored")
		if err := inst.Destroy(ctx); err != nil {
			return res, err
		}
		t0 = time.Now()
		u, err := open.Start(ctx, spec(i, "u"))
		if err != nil {
			return res, err
		}
		if err := execTrue(ctx, u); err != nil {
			_ = u.Destroy(ctx)
			return res, err
		}
		unconfined = append(unconfined, time.Since(t0))
		if err := u.Destroy(ctx); err != nil {
			return res, err
		}
		o.Logger.Info("bench vm round", "i", i, "floor", f, "create_exec", create[len(create)-1], "boot_create_exec", bt)
	}
	res.Floor, res.CreateExec, res.ExecTrue, res.Pause, res.Resume = stat(floor), stat(create), stat(execT), stat(pause), stat(resume)
	res.BootExec, res.UnconfinedExec = stat(bootCreate), stat(unconfined)
	if res.UnconfinedExec.P50ms > 0 {
		res.ConfinedRatioP50 = res.CreateExec.P50ms / res.UnconfinedExec.P50ms
	}
	if res.Floor.P50ms > 0 {
		res.RatioP50 = res.CreateExec.P50ms / res.Floor.P50ms
		res.RatioP99 = res.CreateExec.P99ms / res.Floor.P99ms
		res.BootRatioP50 = res.BootExec.P50ms / res.Floor.P50ms
		res.BootRatioP99 = res.BootExec.P99ms / res.Floor.P99ms
	}
	noFPR, err := microvm.New(microvm.Config{StateDir: dir, Logger: o.Logger, NoFreePageReporting: true, NoSnapshots: true})
	if err != nil {
		return res, err
	}
	if res.IdleRSSRestoredMiB, res.IdlePSSRestoredMiB, err = idleMem(ctx, d, o, spec); err != nil {
		return res, err
	}
	if res.IdleRSSFPRMiB, res.IdlePSSFPRMiB, err = idleMem(ctx, boot, o, spec); err != nil {
		return res, err
	}
	if res.IdleRSSNoMiB, res.IdlePSSNoMiB, err = idleMem(ctx, noFPR, o, spec); err != nil {
		return res, err
	}
	if res.IdlePSSFPRMiB > 0 {
		res.FitIn24GiB = int(24 * 1024 / res.IdlePSSFPRMiB)
	}
	if res.IdlePSSNoMiB > 0 {
		res.FitIn24GiBNo = int(24 * 1024 / res.IdlePSSNoMiB)
	}
	return res, nil
}

// createExec creates a sandbox with d, runs `true` in it, destroys it and
// returns the time to the exec's answer.
func createExec(ctx context.Context, d *microvm.Driver, sp driver.Spec, o Options, res *Result, i int, what string) (time.Duration, error) {
	t0 := time.Now()
	inst, err := d.Start(ctx, sp)
	if err != nil {
		return 0, err
	}
	err = execTrue(ctx, inst)
	took := time.Since(t0)
	addTrace(res, o, inst, i, what)
	if derr := inst.Destroy(ctx); err == nil {
		err = derr
	}
	return took, err
}

// addTrace adds inst's timelines to res.Traces (Options.Trace).
func addTrace(res *Result, o Options, inst driver.Instance, i int, what string) {
	tr, ok := inst.(tracer)
	if !ok || !o.Trace {
		return
	}
	// The guest prints its timeline after the first exec's reply.
	res.Traces = append(res.Traces, fmt.Sprintf("round %d %s host: %s", i, what, tr.HostTrace()))
	for _, g := range tr.Trace() {
		res.Traces = append(res.Traces, fmt.Sprintf("round %d %s guest: %s", i, what, g))
	}
}

// tracer is a microvm instance's boot timeline (microvm.Config.Trace).
type tracer interface {
	HostTrace() string
	Trace() []string
}

func execTrue(ctx context.Context, inst driver.Instance) error {
	pr, err := inst.Exec(ctx, driver.ProcSpec{Args: []string{"/bin/true"}, Cwd: "/"}, driver.Stdio{})
	if err != nil {
		return err
	}
	defer pr.Close()
	ex, err := pr.Wait(ctx)
	if err != nil {
		return err
	}
	if ex.Code != 0 {
		return fmt.Errorf("true exited %+v", ex)
	}
	return nil
}

// idleMem boots o.IdleVMs VMs, runs a command that touches memory and frees
// it (what a task does), lets them idle and returns the mean QEMU RSS and PSS.
func idleMem(ctx context.Context, d *microvm.Driver, o Options, spec func(int, string) driver.Spec) (rss, pss float64, err error) {
	var insts []driver.Instance
	defer func() {
		for _, in := range insts {
			_ = in.Destroy(context.WithoutCancel(ctx))
		}
	}()
	for i := 0; i < o.IdleVMs; i++ {
		in, err := d.Start(ctx, spec(i, fmt.Sprintf("idle%v", d.FreePageReporting())))
		if err != nil {
			return 0, 0, err
		}
		insts = append(insts, in)
		// 128 MiB through the page cache and a process's heap, then freed.
		pr, err := in.Exec(ctx, driver.ProcSpec{Args: []string{"/bin/sh", "-c",
			"dd if=/dev/zero of=/tmp/f bs=1M count=128 2>/dev/null; rm /tmp/f; sync; echo 3 > /proc/sys/vm/drop_caches"}, Cwd: "/"}, driver.Stdio{})
		if err != nil {
			return 0, 0, err
		}
		_, _ = pr.Wait(ctx)
		pr.Close()
	}
	select {
	case <-time.After(o.IdleWait):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	for _, in := range insts {
		n, err := in.(driver.Stats).MemoryUsage()
		if err != nil {
			return 0, 0, err
		}
		rss += float64(n) / (1 << 20)
		p, err := in.(interface{ ProportionalMemory() (int64, error) }).ProportionalMemory()
		if err != nil {
			return 0, 0, err
		}
		pss += float64(p) / (1 << 20)
	}
	return rss / float64(len(insts)), pss / float64(len(insts)), nil
}
