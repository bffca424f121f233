package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/bench/peer"
	"github.com/dsec-dev/dsec/internal/image"
)

// CyclePeers are the runtimes `dsec bench cycle` runs beside dsec, in order.
var CyclePeers = []string{"runc", "crun", "runsc", "podman"}

// CycleOptions configure `dsec bench cycle`.
type CycleOptions struct {
	// Rounds is the number of cycles of every side; in each round every side
	// runs one, the starting side rotating.
	Rounds int
	Image  string
	// Bin is the dsec client binary for the CLI and `dsec server` ("" = the
	// dsec beside this executable when it is dsecd, else this executable).
	Bin string
	// Python is the interpreter ("" = /usr/bin/python3, Debian's, where it
	// exists, else python3 on PATH).
	Python string
	// PythonSDK is a directory holding the dsec Python package ("" = the
	// installed one, else sdk/python beside the binary's bin/).
	PythonSDK string
	// Node is the Node.js binary of the e2b SDK side ("" = node on PATH).
	Node string
	// E2BSDK is a directory whose node_modules holds the e2b npm package
	// ("" = test/e2b beside the binary's bin/, as `npm ci` there leaves it).
	E2BSDK string
	// Peers default to CyclePeers; a peer not installed is reported missing.
	Peers []string
	// WarmPool > 0 adds a second server, `dsec server --warm-pool WarmPool`,
	// and the CLI and Python SDK cycles against it (sides named NAME-warm)
	// to the same interleaved rounds.
	WarmPool int
	Logger   func(format string, args ...any)
}

// CycleSide is one side's cycles (or start-ups).
type CycleSide struct {
	N          int    `json:"n"`
	Failures   int    `json:"failures"`
	FirstError string `json:"first_error,omitempty"`
	Latencies
	Work string `json:"work"`
}

// CycleResult is the outcome of `dsec bench cycle`.
type CycleResult struct {
	Rounds int    `json:"rounds"`
	Image  string `json:"image"`
	// WarmPool is the pool size of the -warm sides' server (0: no such side).
	WarmPool int `json:"warm_pool,omitempty"`
	// Order is the sides' order in the first round (each round starts one
	// later).
	Order []string              `json:"order"`
	Sides map[string]*CycleSide `json:"sides"`
	// Startup is each client's bare process start-up (`dsec --help`,
	// `python3 -c pass`), interleaved with the cycles.
	Startup map[string]*CycleSide `json:"startup"`
	// Missing are the sides that could not run here, with why (a peer not
	// installed, no Python SDK).
	Missing map[string]string `json:"missing"`
	// RatiosP50 are "dsec side/peer" of the cycles' p50 (below 1: dsec faster).
	RatiosP50 map[string]float64 `json:"ratios_p50"`
}

// cycleSide is one way to run the cycle once.
type cycleSide struct {
	name, work string
	startup    bool
	run        func(ctx context.Context) (time.Duration, error)
	close      func()
}

// timed runs a whole process and times it.
func timed(ctx context.Context, env []string, bin string, args ...string) (time.Duration, string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var errb strings.Builder
	cmd.Stderr = &errb
	t0 := time.Now()
	out, err := cmd.Output()
	d := time.Since(t0)
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return d, strings.TrimSpace(string(out)), err
}

// Cycle times the whole user cycle, create, exec `true`, remove, through
// dsec's CLI (three processes against a `dsec server` process) and Python
// SDK and through each peer runtime's one-shot run on the same root file
// system, in interleaved rounds; and each client's bare start-up.
func Cycle(ctx context.Context, o CycleOptions) (CycleResult, error) {
	o.Rounds = max(o.Rounds, 1)
	if o.Image == "" {
		o.Image = daemon.DefaultImage
	}
	if o.Peers == nil {
		o.Peers = CyclePeers
	}
	if o.Logger == nil {
		o.Logger = func(string, ...any) {}
	}
	if o.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return CycleResult{}, fmt.Errorf("bench cycle: the dsec binary: %w", err)
		}
		o.Bin = exe
	}
	// The client is the dsec beside dsecd; its `dsec server` runs dsecd.
	o.Bin = clientBinary(o.Bin)
	img, err := resolveImage(o.Image)
	if err != nil {
		return CycleResult{}, err
	}
	if len(img.Lower()) != 1 {
		return CycleResult{}, fmt.Errorf("bench cycle: peers run on one rootfs directory; image %q has %d lower directories", o.Image, len(img.Lower()))
	}
	rootfs := img.Lower()[0]
	srv, err := startServer(ctx, o.Bin, "", "--log-level", "warn")
	if err != nil {
		return CycleResult{}, err
	}
	defer srv.stop()
	env := append(os.Environ(), "DSEC_ADDR="+srv.Addr, "DSEC_TOKEN="+srv.Token)
	res := CycleResult{Rounds: o.Rounds, Image: o.Image, Sides: map[string]*CycleSide{},
		Startup: map[string]*CycleSide{}, Missing: map[string]string{}, RatiosP50: map[string]float64{}}

	sides := dsecClientSides(env, o, "", "")
	for _, run := range []bool{false, true} {
		if py, err := pythonSDKSide(ctx, env, o, run); err != nil {
			res.Missing[pythonSideName(run)] = err.Error()
		} else {
			sides = append(sides, py)
		}
	}
	if e2b, err := e2bSDKSide(ctx, srv, o); err != nil {
		res.Missing["e2b-sdk"] = err.Error()
	} else {
		sides = append(sides, e2b)
	}
	if o.WarmPool > 0 {
		warm, err := startServer(ctx, o.Bin, "", "--log-level", "warn", "--warm-pool", strconv.Itoa(o.WarmPool))
		if err != nil {
			return CycleResult{}, err
		}
		defer warm.stop()
		res.WarmPool = o.WarmPool
		wenv := append(os.Environ(), "DSEC_ADDR="+warm.Addr, "DSEC_TOKEN="+warm.Token)
		why := fmt.Sprintf(" (a server with --warm-pool %d: each create takes a sandbox started ahead)", o.WarmPool)
		sides = append(sides, dsecClientSides(wenv, o, "-warm", why)...)
		for _, c := range []struct {
			name string
			side func() (*cycleSide, error)
		}{
			{"python-sdk", func() (*cycleSide, error) { return pythonSDKSide(ctx, wenv, o, false) }},
			{"python-sdk-run", func() (*cycleSide, error) { return pythonSDKSide(ctx, wenv, o, true) }},
			{"e2b-sdk", func() (*cycleSide, error) { return e2bSDKSide(ctx, warm, o) }},
		} {
			if s, err := c.side(); err != nil {
				res.Missing[c.name+"-warm"] = err.Error()
			} else {
				s.name, s.work = s.name+"-warm", s.work+why
				sides = append(sides, s)
			}
		}
	}
	for _, name := range o.Peers {
		s, err := peerCycleSide(name, rootfs)
		if err != nil {
			res.Missing[name] = err.Error()
			continue
		}
		sides = append(sides, s)
	}
	defer func() {
		for _, s := range sides {
			if s.close != nil {
				s.close()
			}
		}
	}()
	sides = append(sides, &cycleSide{name: "dsec --help", startup: true, work: "bare start-up of the dsec CLI",
		run: func(ctx context.Context) (time.Duration, error) {
			d, _, err := timed(ctx, env, o.Bin, "--help")
			return d, err
		}})
	if python, err := findPython(o.Python); err != nil {
		res.Missing["python3 -c pass"] = err.Error()
	} else {
		sides = append(sides, &cycleSide{name: "python3 -c pass", startup: true, work: "bare start-up of " + python,
			run: func(ctx context.Context) (time.Duration, error) {
				d, _, err := timed(ctx, env, python, "-c", "pass")
				return d, err
			}})
	}
	return runCycles(ctx, o, sides, res)
}

// dsecClientSides are the CLI's cycles against the server env names, named
// dsec-cli and dsec-run with suffix, their work described with why.
func dsecClientSides(env []string, o CycleOptions, suffix, why string) []*cycleSide {
	return []*cycleSide{{name: "dsec-cli" + suffix, work: "`dsec create`, `dsec exec ID -- true`, `dsec rm ID`: three processes against a dsec server process" + why,
		run: func(ctx context.Context) (time.Duration, error) {
			args := []string{"create"}
			if o.Image != daemon.DefaultImage {
				args = append(args, "--image", o.Image)
			}
			d1, id, err := timed(ctx, env, o.Bin, args...)
			if err != nil {
				return 0, err
			}
			d2, _, err := timed(ctx, env, o.Bin, "exec", id, "--", "true")
			d3, _, rerr := timed(ctx, env, o.Bin, "rm", id)
			return d1 + d2 + d3, errors.Join(err, rerr)
		}}, {name: "dsec-run" + suffix, work: "`dsec run --rm -- true`: one process against a dsec server process, as `runc run` is one" + why,
		run: func(ctx context.Context) (time.Duration, error) {
			args := []string{"run", "--rm"}
			if o.Image != daemon.DefaultImage {
				args = append(args, "--image", o.Image)
			}
			d, _, err := timed(ctx, env, o.Bin, append(args, "--", "true")...)
			return d, err
		}}}
}

// runCycles runs the sides' interleaved rounds into res.
func runCycles(ctx context.Context, o CycleOptions, sides []*cycleSide, res CycleResult) (CycleResult, error) {
	lat := map[string][]time.Duration{}
	for _, s := range sides {
		res.Order = append(res.Order, s.name)
		r := &CycleSide{Work: s.work}
		if s.startup {
			res.Startup[s.name] = r
		} else {
			res.Sides[s.name] = r
		}
		// One warm-up cycle each (page cache, the server's first create).
		if _, err := s.run(ctx); err != nil {
			r.Failures, r.FirstError = 1, "warm-up: "+err.Error()
		}
	}
	for i := range o.Rounds {
		for j := range sides {
			s := sides[(i+j)%len(sides)]
			r := res.Sides[s.name]
			if s.startup {
				r = res.Startup[s.name]
			}
			d, err := s.run(ctx)
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if err != nil {
				r.Failures++
				if r.FirstError == "" {
					r.FirstError = err.Error()
				}
				continue
			}
			r.N++
			lat[s.name] = append(lat[s.name], d)
		}
		o.Logger("round %d of %d done", i+1, o.Rounds)
	}
	for name, r := range res.Sides {
		r.Latencies = summarize(lat[name])
	}
	for name, r := range res.Startup {
		r.Latencies = summarize(lat[name])
	}
	ratio := func(a, b string) {
		if x, y := res.Sides[a], res.Sides[b]; x != nil && y != nil && x.P50ms > 0 && y.P50ms > 0 {
			res.RatiosP50[a+"/"+b] = round(x.P50ms/y.P50ms, 3)
		}
	}
	for _, d := range []string{"dsec-cli", "dsec-run", "python-sdk", "python-sdk-run", "e2b-sdk",
		"dsec-cli-warm", "dsec-run-warm", "python-sdk-warm", "python-sdk-run-warm", "e2b-sdk-warm"} {
		for _, p := range o.Peers {
			ratio(d, p)
		}
	}
	ratio("e2b-sdk", "python-sdk")
	ratio("e2b-sdk-warm", "python-sdk-warm")
	ratio("python-sdk-run", "python-sdk")
	for _, d := range []string{"dsec-cli", "dsec-run", "python-sdk", "python-sdk-run", "e2b-sdk"} {
		ratio(d+"-warm", d)
	}
	return res, nil
}

// resolveImage finds a local image by name in the images directory
// ($DSEC_IMAGES_DIR or the default).
func resolveImage(name string) (image.Image, error) {
	dir := os.Getenv("DSEC_IMAGES_DIR")
	if dir == "" {
		dir = daemon.DefaultImagesDir
	}
	return (&image.Store{Dir: dir}).Resolve(name)
}

// pythonCycle is the Python SDK sides' client: one process, one cycle per
// line read, each timed in Python and printed in seconds. Its second
// argument "run" makes each cycle one client.run (POST /v1/sandboxes:run)
// instead of create, exec and delete.
const pythonCycle = `
import sys, time, dsec
c = dsec.Client()
image, one = sys.argv[1], sys.argv[2] == "run"
kw = {"image": image} if image else {}
for _ in sys.stdin:
    t = time.perf_counter()
    try:
        if one:
            r = c.run(["true"], **kw)
        else:
            sb = c.create(**kw)
            r = sb.exec(["true"])
            sb.delete()
        if r.exit_code != 0:
            raise RuntimeError("exit code %d" % r.exit_code)
        print("ok %.9f" % (time.perf_counter() - t), flush=True)
    except Exception as e:
        print("error %s" % repr(e).replace("\n", " "), flush=True)
`

// findPython is the interpreter for the Python sides: the one asked for, else
// Debian's, else python3 on PATH (which may be a wrapper that slows start-up).
func findPython(asked string) (string, error) {
	if asked != "" {
		return exec.LookPath(asked)
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3", nil
	}
	return exec.LookPath("python3")
}

// pythonSideName names the Python SDK side: three calls, or one client.run.
func pythonSideName(run bool) string {
	if run {
		return "python-sdk-run"
	}
	return "python-sdk"
}

func pythonSDKSide(ctx context.Context, env []string, o CycleOptions, run bool) (*cycleSide, error) {
	python, err := findPython(o.Python)
	if err != nil {
		return nil, err
	}
	dir := o.PythonSDK
	if dir == "" {
		if exec.CommandContext(ctx, python, "-c", "import dsec").Run() != nil {
			dir = filepath.Join(filepath.Dir(filepath.Dir(o.Bin)), "sdk", "python")
		}
	}
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "dsec", "__init__.py")); err != nil {
			return nil, fmt.Errorf("no dsec Python package installed or in %s (--python-sdk DIR)", dir)
		}
		env = append(env, "PYTHONPATH="+dir)
	}
	image := ""
	if o.Image != daemon.DefaultImage {
		image = o.Image
	}
	name, mode, calls := pythonSideName(run), "cycle", "create, exec [\"true\"], delete"
	if run {
		mode, calls = "run", "client.run([\"true\"]): create, exec and delete in one request"
	}
	cmd := exec.Command(python, "-u", "-c", pythonCycle, image, mode)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	work := "the Python SDK (dsec.Client: " + calls + ") in one long-lived " + python + " process, timed in Python"
	if dir != "" {
		work += " (" + dir + ")"
	}
	return clientSide(name, "python SDK", work, cmd)
}

// clientSide starts cmd, a long-lived client process, as a side whose cycles it runs:
// one per line written to its stdin, answered by "ok SECONDS" or "error
// TEXT" on its stdout.
func clientSide(name, what, work string, cmd *exec.Cmd) (*cycleSide, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(stdout)
	return &cycleSide{name: name, work: work,
		run: func(context.Context) (time.Duration, error) {
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				return 0, fmt.Errorf("%s process: %w", what, err)
			}
			if !lines.Scan() {
				return 0, fmt.Errorf("%s process ended: %v", what, lines.Err())
			}
			kind, rest, _ := strings.Cut(lines.Text(), " ")
			if kind != "ok" {
				return 0, fmt.Errorf("%s: %s", what, rest)
			}
			s, err := strconv.ParseFloat(rest, 64)
			return time.Duration(s * float64(time.Second)), err
		},
		close: func() { stdin.Close(); _ = cmd.Wait() }}, nil
}

// e2bCycle is the e2b SDK side's client (an ES module run by node in a
// directory whose node_modules holds the e2b package): one process, one cycle
// per line read, each timed in Node and printed in seconds.
const e2bCycle = `
import { createInterface } from 'node:readline'
import { Sandbox } from 'e2b'
const template = process.argv[1]
for await (const _ of createInterface({ input: process.stdin })) {
  const t = performance.now()
  try {
    const sb = template ? await Sandbox.create(template) : await Sandbox.create()
    const r = await sb.commands.run('true')
    await sb.kill()
    if (r.exitCode !== 0) throw new Error('exit code ' + r.exitCode)
    console.log('ok ' + ((performance.now() - t) / 1000).toFixed(9))
  } catch (e) {
    console.log('error ' + String(e).replaceAll('\n', ' '))
  }
}
`

// e2bSDKSide runs the cycle through E2B's own JS SDK (the e2b npm package)
// against the server's E2B API: Sandbox.create, commands.run('true'), kill.
func e2bSDKSide(ctx context.Context, srv *serverProc, o CycleOptions) (*cycleSide, error) {
	node := o.Node
	if node == "" {
		node = "node"
	}
	node, err := exec.LookPath(node)
	if err != nil {
		return nil, fmt.Errorf("node not installed (Debian package nodejs): %w", err)
	}
	dir := o.E2BSDK
	if dir == "" {
		dir = filepath.Join(filepath.Dir(filepath.Dir(o.Bin)), "test", "e2b")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		return nil, fmt.Errorf("no e2b npm package in %s/node_modules (npm ci there, or --e2b-sdk DIR)", dir)
	}
	template := ""
	if o.Image != daemon.DefaultImage {
		template = o.Image
	}
	cmd := exec.CommandContext(ctx, node, "--input-type=module", "-e", e2bCycle, template)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+srv.Addr, "E2B_SANDBOX_URL="+srv.Addr, "E2B_API_KEY=e2b_"+srv.Token)
	cmd.Stderr = os.Stderr
	work := "E2B's JS SDK (" + dir + "/node_modules/e2b: Sandbox.create, commands.run('true'), kill) in one long-lived " + node + " process against the E2B API, timed in Node"
	return clientSide("e2b-sdk", "e2b SDK", work, cmd)
}

// peerCycleSide runs `true` in a container of the peer's one-shot run (which
// creates, starts, waits and deletes) on rootfs.
func peerCycleSide(name, rootfs string) (*cycleSide, error) {
	if name == "podman" {
		pm, err := exec.LookPath("podman")
		if err != nil {
			return nil, fmt.Errorf("podman not installed (Debian package podman): %w", err)
		}
		// Podman asks for its own open-file and process limits (1048576
		// and 32768 for root), which a host that does not let root raise a
		// hard limit (no CAP_SYS_RESOURCE, e.g. inside a container)
		// refuses: the container gets this process's limits instead.
		args := []string{"run", "--rm", "--network", "none"}
		for name, res := range map[string]int{"nofile": unix.RLIMIT_NOFILE, "nproc": unix.RLIMIT_NPROC} {
			var l unix.Rlimit
			if err := unix.Getrlimit(res, &l); err == nil {
				args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", name, int64(l.Cur), int64(l.Max)))
			}
		}
		args = append(args, "--rootfs", rootfs+":O", "true")
		return &cycleSide{name: name, work: "podman run --rm --network none --ulimit nofile=…,nproc=… (this process's) --rootfs ROOTFS:O true (overlay on the same rootfs)",
			run: func(ctx context.Context) (time.Duration, error) {
				d, _, err := timed(ctx, nil, pm, args...)
				return d, err
			}}, nil
	}
	var rt peer.Runtime
	switch name {
	case "runsc":
		p, err := exec.LookPath("runsc")
		if err != nil {
			return nil, fmt.Errorf("runsc not installed (gVisor; Debian package runsc): %w", err)
		}
		// Its own network stack needs a network namespace set up for it;
		// the cycle runs without one (loopback only), as dsec's default.
		rt = peer.Runtime{Name: name, Path: p, ExtraArgs: []string{"--network=none"}}
	default:
		var err error
		if rt, err = peer.Find(name); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "dsec-cycle-"+name+"-")
	if err != nil {
		return nil, err
	}
	spec := peer.Spec(rootfs, "dsec-cycle")
	spec.Process.Args = []string{"true"}
	b, err := json.Marshal(spec)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	state := filepath.Join(dir, "state")
	base := append(append([]string{}, rt.ExtraArgs...), "--root", state)
	do, stop, err := peer.Worker(rt)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	n := 0
	return &cycleSide{name: name, work: name + " run (create, start, wait, delete) of `true` on the same rootfs, read-only; " + rt.Note(),
		run: func(ctx context.Context) (time.Duration, error) {
			n++
			id := fmt.Sprintf("dsec-cycle-%d-%d", os.Getpid(), n)
			var d time.Duration
			do(func() {
				d, _, err = timed(ctx, nil, rt.Path, append(base, "run", "--bundle", dir, id)...)
				if err != nil {
					_, _, _ = timed(context.Background(), nil, rt.Path, append(base, "delete", "--force", id)...)
				}
			})
			return d, err
		},
		close: func() { stop(); os.RemoveAll(dir) }}, nil
}
