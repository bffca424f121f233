package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/fncall"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FnCallResult is the outcome of `dsec bench fncall`.
type FnCallResult struct {
	Language string `json:"language"`
	N        int    `json:"n"`
	Parallel int    `json:"parallel"`
	// CallsPerS is the throughput of N calls on Parallel workers;
	// BareCallsPerS the same binary run bare on as many workers, in batches
	// interleaved with the calls'. ThroughputRatio is BareCallsPerS/CallsPerS:
	// it includes the preparation of the next sandboxes that the latencies
	// leave out.
	CallsPerS       float64 `json:"calls_per_s"`
	BareCallsPerS   float64 `json:"bare_calls_per_s"`
	ThroughputRatio float64 `json:"throughput_ratio"`
	// P50ms/P99ms are the latency of one call (one test, the program compiled
	// once) measured sequentially, interleaved with the bare runs.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	// BareP50ms is the same binary run directly on the host (os/exec with the same
	// stdin and captured output), in the same benchmark. Each bare run starts
	// once the engine is idle (Engine.WaitIdle: the slots' next sandboxes
	// prepared), so that preparation does not overlap it and slow it down.
	BareP50ms     float64 `json:"bare_p50_ms"`
	BareP99ms     float64 `json:"bare_p99_ms"`
	OverheadRatio float64 `json:"overhead_ratio"`
	// BarePinned* are bare runs given FnCall's one scheduling setting: the
	// forking thread bound to the CPU it runs on from fork to exec (the
	// child gets the thread's CPUs back once it has exec'd), interleaved
	// with the others. Scheduling says what that setting is.
	BarePinnedP50ms     float64 `json:"bare_pinned_p50_ms"`
	BarePinnedP99ms     float64 `json:"bare_pinned_p99_ms"`
	OverheadRatioPinned float64 `json:"overhead_ratio_pinned"`
	Scheduling          string  `json:"scheduling"`
	CompileMs           float64 `json:"compile_ms"`
	Failures            int     `json:"failures"`
	FirstError          string  `json:"first_error,omitempty"`
	Path                string  `json:"path"`
	// Prepared says what the latency leaves out: each slot's sandbox (pid,
	// mount and ipc namespaces, tmpfs, /proc, seccomp) is set up right after
	// the slot's previous run, off the request path; CallsPerS includes
	// that work.
	Prepared string `json:"prepared"`
}

var helloSources = map[string]map[string]string{
	api.LangC:       {"main.c": "#include <stdio.h>\nint main(void) { puts(\"hello, world\"); return 0; }\n"},
	api.LangCPP:     {"main.cpp": "#include <cstdio>\nint main() { std::puts(\"hello, world\"); }\n"},
	api.LangGo:      {"main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello, world\\n\") }\n"},
	api.LangPython3: {"main.py": "print('hello, world')\n"},
	api.LangBash:    {"main.sh": "echo 'hello, world'\n"},
	api.LangNodeJS:  {"main.js": "console.log('hello, world');\n"},
	api.LangPerl:    {"main.pl": "print \"hello, world\\n\";\n"},
	api.LangRust:    {"main.rs": "fn main() { println!(\"hello, world\"); }\n"},
}

// bareInterpreters run an interpreted language's hello world bare on the host
// (the host's interpreter: the same version as the judge image's for python3,
// bash and perl on Debian bookworm).
var bareInterpreters = map[string]string{api.LangPython3: "python3", api.LangBash: "bash", api.LangNodeJS: "node", api.LangPerl: "perl"}

// FnCall compiles hello world once, then runs it N times through the node's FnCall
// engine in-process (validation, compile cache lookup, sandbox, verdict), and N
// times bare on the host, alternating so both see the same machine state (each
// bare run once the engine finished preparing its next sandbox); then N calls
// and N bare runs on o.Parallel workers for throughput, in interleaved batches.
func FnCall(ctx context.Context, o Options, lang string) (FnCallResult, error) {
	o.defaults()
	if o.Parallel <= 1 {
		o.Parallel = 4
	}
	src, ok := helloSources[lang]
	if !ok {
		return FnCallResult{}, fmt.Errorf("bench fncall: no hello world for language %q", lang)
	}
	d, cleanup, err := openNode(ctx, o)
	if err != nil {
		return FnCallResult{}, err
	}
	defer cleanup()
	want := "hello, world\n"
	req := api.FnCallRequest{Language: lang, Files: src, Image: o.Image,
		Tests: []api.FnCallTest{{ExpectedOutput: &want}}}
	res := FnCallResult{Language: lang, N: o.N, Parallel: o.Parallel,
		Path: "fncall engine in-process (validate, compile cache, the slot's prepared sandbox, verdict)",
		Prepared: "each slot's sandbox (pid/mount/ipc namespaces, tmpfs /w, /proc, seccomp) is set up after the slot's previous run, " +
			"off the request path: the p50/p99 latencies leave it out (each bare run waits until it is done), " +
			"calls_per_s includes it (throughput_ratio compares it with bare runs at the same parallelism)",
		Scheduling: "fncall: no nice or slice; the program is forked bound to its helper's CPU and gets all the helper's CPUs back once it has exec'd, " +
			"before its first instruction; the helper is SCHED_FIFO 1 from the fork until it has reported the program's exit (the program SCHED_OTHER). " +
			"bare_*: plain os/exec; bare_pinned_*: the same: os/exec from a thread bound to its CPU until the child has exec'd, and SCHED_FIFO 1 (reset on fork) until it has collected the child's exit"}
	t0 := time.Now()
	first, err := d.FnCall.Call(ctx, req)
	if err != nil {
		return res, err
	}
	res.CompileMs = ms(time.Since(t0))
	if first.Verdict != api.VerdictAccepted {
		return res, fmt.Errorf("bench fncall: hello world: %s (%+v %+v)", first.Verdict, first.Compile, first.Tests)
	}
	bareRun, cleanBare, err := bareCommand(d.FnCall, lang, src, o.Image)
	if err != nil {
		return res, err
	}
	defer cleanBare()
	bare := func() error { return bareRun(false) }
	call := func() error {
		r, err := d.FnCall.Call(ctx, req)
		if err != nil {
			return err
		}
		if r.Verdict != api.VerdictAccepted {
			return fmt.Errorf("verdict %s: %+v", r.Verdict, r.Tests)
		}
		return nil
	}
	// Warm up both paths.
	for range 20 {
		_ = call()
		_ = bare()
		_ = bareRun(true)
	}
	var lat, bareLat, pinnedLat []time.Duration
	for range o.N {
		s := time.Now()
		err := call()
		lat = append(lat, time.Since(s))
		if err != nil {
			res.Failures++
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
		}
		// The call's slot prepares its next sandbox now: let it finish, or
		// it would slow the bare run down and flatter the ratio.
		if err := d.FnCall.WaitIdle(ctx); err != nil {
			return res, err
		}
		s = time.Now()
		if err := bare(); err != nil {
			return res, fmt.Errorf("bare run: %w", err)
		}
		bareLat = append(bareLat, time.Since(s))
		s = time.Now()
		if err := bareRun(true); err != nil {
			return res, fmt.Errorf("bare pinned run: %w", err)
		}
		pinnedLat = append(pinnedLat, time.Since(s))
	}
	l, b, bp := summarize(lat), summarize(bareLat), summarize(pinnedLat)
	res.P50ms, res.P99ms, res.BareP50ms, res.BareP99ms = l.P50ms, l.P99ms, b.P50ms, b.P99ms
	res.BarePinnedP50ms, res.BarePinnedP99ms = bp.P50ms, bp.P99ms
	if b.P50ms > 0 {
		res.OverheadRatio = round(l.P50ms/b.P50ms, 3)
	}
	if bp.P50ms > 0 {
		res.OverheadRatioPinned = round(l.P50ms/bp.P50ms, 3)
	}
	// Throughput: batches of calls and bare runs, alternating.
	const batches = 4
	var wall, bareWall time.Duration
	done, bareDone := 0, 0
	for b := range batches {
		n := o.N / batches
		if b < o.N%batches {
			n++
		}
		_, w, failures, ferr := runLoad(ctx, n, o.Parallel, false, func(int, int) error { return call() })
		wall += w
		done += n - failures
		res.Failures += failures
		if ferr != nil && res.FirstError == "" {
			res.FirstError = ferr.Error()
		}
		if err := d.FnCall.WaitIdle(ctx); err != nil {
			return res, err
		}
		_, w, failures, ferr = runLoad(ctx, n, o.Parallel, false, func(int, int) error { return bare() })
		if ferr != nil {
			return res, fmt.Errorf("bare run: %w", ferr)
		}
		bareWall += w
		bareDone += n - failures
	}
	res.CallsPerS = round(float64(done)/wall.Seconds(), 1)
	res.BareCallsPerS = round(float64(bareDone)/bareWall.Seconds(), 1)
	if res.CallsPerS > 0 {
		res.ThroughputRatio = round(res.BareCallsPerS/res.CallsPerS, 3)
	}
	return res, ctx.Err()
}

// bareCommand returns a function running the compiled program (or interpreter)
// directly on the host: the binary from the engine's compile cache, or the
// image's interpreter through its dynamic loader is not needed since the host
// runs the same Debian release. With pinned, the program is forked the way
// FnCall forks it (see pinnedStart).
func bareCommand(e *fncall.Engine, lang string, src map[string]string, image string) (func(pinned bool) error, func(), error) {
	var args []string
	cleanup := func() {}
	switch lang {
	case api.LangC, api.LangCPP, api.LangGo, api.LangRust:
		bin, err := e.CompiledBinary(lang, src, image)
		if err != nil {
			return nil, nil, err
		}
		args = []string{bin}
	default:
		dir, err := os.MkdirTemp("", "fncall-bare-")
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
		for name, body := range src {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				return nil, nil, err
			}
		}
		interp, ok := bareInterpreters[lang]
		if !ok {
			cleanup()
			return nil, nil, fmt.Errorf("no bare run for language %q", lang)
		}
		for name := range src {
			args = []string{interp, filepath.Join(dir, name)}
		}
	}
	return func(pinned bool) error {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin = bytes.NewReader(nil)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		run := cmd.Run
		if pinned {
			run = func() error { return pinnedRun(cmd) }
		}
		if err := run(); err != nil {
			return err
		}
		if out.String() != "hello, world\n" {
			return fmt.Errorf("bare output %q", out.String())
		}
		return nil
	}, cleanup, nil
}

// pinnedRun runs cmd as FnCall's helper runs a program: forked from a thread
// bound to the CPU it runs on (os/exec forks from the calling thread), the
// child getting the thread's CPUs back once it has exec'd (Start returns
// after the exec) and before it runs the program's first instruction; from
// the fork until the child's exit is collected the thread is real-time
// (SCHED_FIFO 1, reset on fork: the child is SCHED_OTHER), so the exec's
// wakeup preempts the child and the exit's wakes the thread at once. Without
// that (no CAP_SYS_NICE) the child may start the program on one CPU.
func pinnedRun(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var allowed, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("affinity: %w", err)
	}
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return fmt.Errorf("getcpu: %w", e)
	}
	one.Set(int(cpu))
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("affinity: %w", err)
	}
	rt := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Flags: unix.SCHED_FLAG_RESET_ON_FORK, Priority: 1}, 0) == nil
	if rt {
		defer func() { _ = unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0) }()
	}
	err := cmd.Start()
	var cerr error
	if err == nil {
		cerr = unix.SchedSetaffinity(cmd.Process.Pid, &allowed)
	}
	if rerr := unix.SchedSetaffinity(0, &allowed); rerr != nil || cerr != nil {
		if err == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return fmt.Errorf("affinity: %w", errors.Join(err, cerr, rerr))
	}
	if err != nil {
		return err
	}
	return cmd.Wait()
}
