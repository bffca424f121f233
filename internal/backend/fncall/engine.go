// Package fncall runs untrusted programs online-judge style: every run gets a
// fresh, strictly limited process sandbox from a warm pool.
//
// A pool per image holds a few zygotes (csrc/fncall/dsec-fncall.c, one per core):
// long-lived static C processes that already sit in a prepared mount namespace
// (the image's directories bind-mounted read-only, a minimal /dev), hold one
// empty network namespace per slot, and keep one fresh sandbox per slot
// ready: clone(CLONE_NEWPID) → a helper as PID 1 that unshares mount and IPC
// namespaces, joins the slot's network namespace and pre-created cgroup,
// mounts a fresh tmpfs work directory /w (and /proc), takes no_new_privs and
// the default seccomp profile, and waits. A run's request goes from the
// engine straight to its slot's helper (a socket per slot), which copies the
// files in (a compiled program is bind-mounted read-only from the compile
// cache instead: bindfile.go) and forks the program with rlimits and an
// unprivileged per-slot uid. When the program exits the helper exits, the kernel kills whatever else
// is left in the pid namespace, and the zygote clones the slot's next helper
// (with the namespace parameters of the run before; a run that needs others
// has the zygote replace the helper first). Each helper serves one run:
// nothing is shared between runs; the setup moved off the request path, not
// out of the sandbox.
//
// Everything that can be done once is: the skeleton root, the network
// namespaces (one per slot: concurrent runs never share one), the cgroups (one
// per slot, reused: they are necessarily empty once the pid namespace is gone;
// limits are rewritten only when they change) and the seccomp program.
package fncall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/seccomp"
	"github.com/dsec-dev/dsec/pkg/api"
)

// DefaultImage is the environment calls run in unless they name one.
const DefaultImage = "judge"

// Config configures an Engine.
type Config struct {
	// Images resolves image names; its Default is ignored (DefaultImage).
	Images *image.Store
	// StateDir holds the zygote binary, the zygotes' staging directories and the
	// compile cache (StateDir/cache).
	StateDir string
	// CgroupRoot is where cgroup file systems are mounted (default /sys/fs/cgroup).
	CgroupRoot string
	// CgroupParent is the parent cgroup of the slots (default
	// "dsec-fncall-<hash of StateDir>").
	CgroupParent string
	// Zygotes per image (default: the number of CPUs); SlotsPerZygote bounds the
	// runs each zygote has in flight (default 8).
	Zygotes        int
	SlotsPerZygote int
	// UIDBase is the uid of slot 0; slot i runs as UIDBase+i (default 2000000).
	UIDBase int
	Logger  *slog.Logger
}

// Engine runs FnCalls. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	cg      *cgroups.Hierarchy
	seccomp *os.File
	// devnull is the stdin of runs that have none (one descriptor for all:
	// the zygote gets a copy per run).
	devnull *os.File
	// chunks are read buffers for runs' output (two per run; allocating
	// and zeroing 64 KiB per run showed in profiles).
	chunks sync.Pool
	zpath  string
	cache  *compileCache
	ids    atomic.Uint64

	mu     sync.Mutex
	pools  map[string]*pool
	closed bool
	nslots int // slots handed out so far (uids, cgroup names)

	// beforeSend and afterSend, if set (tests), run right before a run's
	// request is sent (after the last context check before it) and right
	// after the send returned (before the run's gate is opened).
	beforeSend, afterSend func()
}

// New prepares an engine; pools start on first use.
func New(cfg Config) (*Engine, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("fncall: StateDir is required")
	}
	if cfg.Images == nil {
		return nil, errors.New("fncall: Images is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	sum := sha256.Sum256([]byte(cfg.StateDir))
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "dsec-fncall-" + hex.EncodeToString(sum[:4])
	}
	if cfg.Zygotes <= 0 {
		cfg.Zygotes = runtime.NumCPU()
	}
	if cfg.SlotsPerZygote <= 0 {
		cfg.SlotsPerZygote = 8
	}
	if cfg.UIDBase <= 0 {
		cfg.UIDBase = 2000000
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("fncall: %w", err)
	}
	zpath, err := installZygote(filepath.Join(cfg.StateDir, "bin"))
	if err != nil {
		return nil, fmt.Errorf("fncall: install zygote: %w", err)
	}
	h, err := cgroups.Detect(cfg.CgroupRoot)
	if err != nil {
		return nil, fmt.Errorf("fncall: cgroups: %w", err)
	}
	prog, err := seccomp.Default().Compile()
	if err != nil {
		return nil, fmt.Errorf("fncall: seccomp: %w", err)
	}
	mfd, err := seccomp.MemFD(prog)
	if err != nil {
		return nil, fmt.Errorf("fncall: seccomp: %w", err)
	}
	cache, err := newCompileCache(filepath.Join(cfg.StateDir, "cache"))
	if err != nil {
		mfd.Close()
		return nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		mfd.Close()
		return nil, fmt.Errorf("fncall: %w", err)
	}
	return &Engine{cfg: cfg, log: cfg.Logger, cg: h, seccomp: mfd, devnull: devnull, zpath: zpath, cache: cache,
		pools: map[string]*pool{}, chunks: sync.Pool{New: func() any { return new([readChunk]byte) }}}, nil
}

// Close stops every zygote (killing runs in flight) and removes the cgroups.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	pools := e.pools
	e.pools = map[string]*pool{}
	e.mu.Unlock()
	var errs []error
	for _, p := range pools {
		errs = append(errs, p.close())
	}
	if g, err := e.cg.Open(e.cfg.CgroupParent); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, g.Delete(ctx))
		cancel()
	}
	e.cache.close()
	errs = append(errs, e.seccomp.Close(), e.devnull.Close())
	return errors.Join(errs...)
}

// pool is the warm pool of one image.
type pool struct {
	e      *Engine
	image  string
	rootfs string
	zs     []*zholder
	slots  []*slot
	free   chan *slot
}

// zholder holds one zygote, restarted when it died.
type zholder struct {
	p     *pool
	index int
	slots []*slot
	stage string

	mu sync.Mutex
	z  *zygote
}

// slot is one concurrent run's resources: cgroup, uid, network namespace (inside
// its zygote).
type slot struct {
	zh    *zholder
	index int // within the zygote
	uid   int
	group *cgroups.Group
	procs []*os.File // cgroup.procs files the run joins
	mem   cgMemFiles
	pids  string // pids.max path

	memLimit, pidsMax int64 // as currently written
	oomKills          uint64
	// prep: the namespace parameters of the slot's helper in zygote
	// prepZ (the last run's: the zygote prepares the next helper with them)
	prep  sandboxParams
	prepZ *zygote
}

// sandboxParams are what a slot's prepared helper was set up with.
type sandboxParams struct {
	uid, gid, flags uint32
	tmpfs           uint64
}

type cgMemFiles struct{ limit, memsw string }

func (e *Engine) pool(name string) (*pool, error) {
	if name == "" {
		name = DefaultImage
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errdefs.New(api.CodeUnavailable, "fncall engine is closed")
	}
	if p, ok := e.pools[name]; ok {
		return p, nil
	}
	img, err := e.cfg.Images.Resolve(name)
	if err != nil {
		return nil, err
	}
	if len(img.Lower()) != 1 {
		return nil, errdefs.Invalid("image %q has %d layers; fncall needs a single-directory image", name, len(img.Lower()))
	}
	p := &pool{e: e, image: name, rootfs: img.Lower()[0]}
	if err := p.start(); err != nil {
		_ = p.close()
		return nil, err
	}
	e.pools[name] = p
	return p, nil
}

func (p *pool) start() error {
	e := p.e
	p.free = make(chan *slot, e.cfg.Zygotes*e.cfg.SlotsPerZygote)
	for zi := range e.cfg.Zygotes {
		stage, err := os.MkdirTemp(e.cfg.StateDir, "stage-")
		if err != nil {
			return fmt.Errorf("fncall: %w", err)
		}
		zh := &zholder{p: p, index: zi, stage: stage}
		p.zs = append(p.zs, zh)
		for si := range e.cfg.SlotsPerZygote {
			s, err := e.newSlot(zh, si)
			if err != nil {
				return err
			}
			zh.slots = append(zh.slots, s)
			p.slots = append(p.slots, s)
		}
		if _, err := zh.get(); err != nil {
			return err
		}
	}
	for _, s := range p.slots {
		p.free <- s
	}
	return nil
}

// Defaults for a slot's cgroup until a run asks for other limits.
const (
	defaultMemory = 256 << 20
	defaultPids   = 64
)

func (e *Engine) newSlot(zh *zholder, index int) (*slot, error) {
	n := e.nslots
	e.nslots++
	name := fmt.Sprintf("%s/slot-%d", e.cfg.CgroupParent, n)
	if old, err := e.cg.Open(name); err == nil { // a leftover of a crashed engine
		_ = old.Kill()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = old.Delete(ctx)
		cancel()
	}
	g, err := e.cg.Create(name, cgroups.Limits{MemoryBytes: defaultMemory, PidsMax: defaultPids})
	if err != nil {
		return nil, fmt.Errorf("fncall: create slot cgroup: %w", err)
	}
	s := &slot{zh: zh, index: index, uid: e.cfg.UIDBase + n, group: g, memLimit: defaultMemory, pidsMax: defaultPids}
	var dirs []string
	if e.cg.Version() == 2 {
		dirs = []string{g.Path()}
		s.mem = cgMemFiles{limit: filepath.Join(g.Path(), "memory.max"), memsw: filepath.Join(g.Path(), "memory.swap.max")}
		s.pids = filepath.Join(g.Path(), "pids.max")
	} else {
		pidsDir, err := v1Dir(e.cfg.CgroupRoot, "pids", name)
		if err != nil {
			return nil, err
		}
		dirs = []string{g.Path(), pidsDir}
		s.mem = cgMemFiles{limit: filepath.Join(g.Path(), "memory.limit_in_bytes"), memsw: filepath.Join(g.Path(), "memory.memsw.limit_in_bytes")}
		s.pids = filepath.Join(pidsDir, "pids.max")
	}
	for _, d := range dirs {
		f, err := os.OpenFile(filepath.Join(d, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("fncall: open slot cgroup: %w", err)
		}
		s.procs = append(s.procs, f)
	}
	if n, err := g.OOMKills(); err == nil {
		s.oomKills = n
	}
	return s, nil
}

// v1Dir finds group name's directory in controller ctrl's v1 hierarchy.
func v1Dir(root, ctrl, name string) (string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return "", fmt.Errorf("fncall: %w", err)
	}
	for _, ent := range ents {
		if ent.Name() != ctrl && !slices.Contains(strings.Split(ent.Name(), ","), ctrl) {
			continue
		}
		d := filepath.Join(root, ent.Name())
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
			continue
		}
		return filepath.Join(d, name), nil
	}
	return "", fmt.Errorf("fncall: no cgroup v1 %s hierarchy under %s", ctrl, root)
}

// setLimits rewrites the slot's cgroup limits when they differ from the last run's.
func (s *slot) setLimits(mem, pids int64) error {
	if mem != s.memLimit {
		v := strconv.FormatInt(mem, 10)
		// memsw must never be below the memory limit (v1): order the writes.
		first, second := s.mem.limit, s.mem.memsw
		if mem > s.memLimit {
			first, second = second, first
		}
		if s.zh.p.e.cg.Version() == 2 {
			first, second = s.mem.limit, ""
		}
		for _, f := range []string{first, second} {
			if f == "" {
				continue
			}
			if err := os.WriteFile(f, []byte(v), 0); err != nil && !(f == s.mem.memsw && errors.Is(err, os.ErrNotExist)) {
				s.memLimit = -1
				return fmt.Errorf("fncall: set memory limit: %w", err)
			}
		}
		s.memLimit = mem
	}
	if pids != s.pidsMax {
		if err := os.WriteFile(s.pids, []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
			s.pidsMax = -1
			return fmt.Errorf("fncall: set pids limit: %w", err)
		}
		s.pidsMax = pids
	}
	return nil
}

// get returns the running zygote, starting it (again) if needed.
func (zh *zholder) get() (*zygote, error) {
	zh.mu.Lock()
	defer zh.mu.Unlock()
	if zh.z != nil {
		select {
		case <-zh.z.dead:
			zh.p.e.log.Warn("fncall: zygote died; restarting", "image", zh.p.image, "err", zh.z.deadErr())
			zh.z.close()
			zh.z = nil
		default:
			return zh.z, nil
		}
	}
	var cg [][]*os.File
	for _, s := range zh.slots {
		cg = append(cg, s.procs)
	}
	z, err := startZygote(zh.p.e.zpath, zh.p.rootfs, zh.stage, len(zh.slots), cg, zh.p.e.seccomp)
	if err != nil {
		return nil, errdefs.Internal(err, "start fncall zygote")
	}
	zh.z = z
	return z, nil
}

func (p *pool) close() error {
	var errs []error
	for _, zh := range p.zs {
		zh.mu.Lock()
		if zh.z != nil {
			zh.z.close()
			zh.z = nil
		}
		zh.mu.Unlock()
		_ = os.Remove(zh.stage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range p.slots {
		for _, f := range s.procs {
			f.Close()
		}
		_ = s.group.Kill()
		if err := s.group.Delete(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *pool) acquire(ctx context.Context) (*slot, error) {
	select {
	case s := <-p.free:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pool) release(s *slot) { p.free <- s }

// WaitIdle waits until no run is in flight and every slot's next sandbox is
// prepared (its helper finished its setup and waits for a request), in every
// pool: the machine is as quiet as the engine leaves it between calls. It
// changes nothing; benchmarks call it before timing something else, which the
// engine's preparation of the next sandboxes would otherwise overlap.
func (e *Engine) WaitIdle(ctx context.Context) error {
	e.mu.Lock()
	pools := make([]*pool, 0, len(e.pools))
	for _, p := range e.pools {
		pools = append(pools, p)
	}
	e.mu.Unlock()
	const poll = 50 * time.Microsecond
	idle := func(p *pool) (bool, error) {
		// every slot back in the pool: its run's helper was reaped
		if len(p.free) < cap(p.free) {
			return false, nil
		}
		for _, zh := range p.zs {
			zh.mu.Lock()
			z := zh.z
			zh.mu.Unlock()
			if z == nil {
				continue
			}
			n, err := z.busy(e.ids.Add(1))
			if err != nil || n > 0 {
				return false, err
			}
		}
		return true, nil
	}
	for _, p := range pools {
		for {
			ok, err := idle(p)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(poll):
			}
		}
	}
	return nil
}

// File is one file placed in the run's work directory.
type File struct {
	Name string // relative to /w
	Mode uint32
	F    *os.File // read from offset 0 (the file offset is not used)
	// Bind places F itself, read-only, instead of a copy (bindfile.go); Mode
	// is then F's own.
	Bind bool
}

// Limits bound one run.
type Limits struct {
	CPU      time.Duration
	Wall     time.Duration
	Memory   int64
	Procs    int64
	Output   int64 // stdout bytes kept; more is output_limit
	Stderr   int64 // stderr bytes kept; more is truncated
	FileSize int64
	Tmpfs    int64 // size of /w (default Memory)
	Stack    int64 // RLIMIT_STACK (0: the zygote's, 8 MiB)
}

// Spec is one run.
type Spec struct {
	Image  string
	Args   []string
	Env    []string
	Cwd    string // default /w
	Files  []File
	Stdin  *os.File // nil: empty
	Limits Limits
	// NoProc leaves /proc empty (saves a mount per run).
	NoProc bool
}

// Result is what happened to a run.
type Result struct {
	// Exited/ExitCode/Signal describe the program (the first process).
	Exited   bool
	ExitCode int
	Signal   syscall.Signal
	CPU      time.Duration // user+system of the whole process tree
	Wall     time.Duration
	MaxRSS   int64
	OOM      bool
	// Killed is why dsec killed the run: "wall", "output" or "canceled".
	Killed          string
	Stdout, Stderr  []byte
	StdoutOver      bool // more than Limits.Output
	StderrTruncated bool
	// ExecErr is set when the program could not be started (not found, ...).
	ExecErr string
}

// Run runs spec in a fresh sandbox. An error means an infrastructure failure.
func (e *Engine) Run(ctx context.Context, spec Spec) (Result, error) {
	p, err := e.pool(spec.Image)
	if err != nil {
		return Result{}, err
	}
	s, err := p.acquire(ctx)
	if err != nil {
		return Result{}, err
	}
	return e.runOn(ctx, p, s, spec)
}

// runOn runs spec on slot s and gives s back to p once the run's helper was
// reaped (which may be after runOn returned: the answer only needs the
// program's exit and its output).
func (e *Engine) runOn(ctx context.Context, p *pool, s *slot, spec Spec) (Result, error) {
	l := spec.Limits
	if l.Tmpfs <= 0 {
		l.Tmpfs = l.Memory
	}
	if err := s.setLimits(l.Memory, l.Procs+1); err != nil { // +1: the pid-1 helper
		p.release(s)
		return Result{}, errdefs.Internal(err, "fncall slot limits")
	}
	z, err := s.zh.get()
	if err != nil {
		p.release(s)
		return Result{}, err
	}
	stdin := spec.Stdin
	if stdin == nil {
		stdin = e.devnull
	}
	outR, outW, err := outputPipe()
	if err != nil {
		p.release(s)
		return Result{}, errdefs.Internal(err, "pipe")
	}
	defer outR.Close()
	errR, errW, err := outputPipe()
	if err != nil {
		unix.Close(outW)
		p.release(s)
		return Result{}, errdefs.Internal(err, "pipe")
	}
	defer errR.Close()
	cwd := spec.Cwd
	if cwd == "" {
		cwd = "/w"
	}
	r := &runReq{
		op: opRun, slot: uint32(s.index), id: e.ids.Add(1), uid: uint32(s.uid), gid: uint32(s.uid),
		rlFsize: uint64(l.FileSize), rlNproc: uint64(l.Procs), rlNofile: 256, rlStack: uint64(l.Stack), tmpfsSize: uint64(l.Tmpfs),
		argv: spec.Args, env: spec.Env, cwd: cwd,
	}
	if l.CPU > 0 {
		r.rlCPU = uint64((l.CPU + time.Second - 1) / time.Second)
	}
	if !spec.NoProc {
		r.flags |= flagProc
	}
	fds := []int{int(stdin.Fd()), outW, errW}
	defer fileEntries(r, spec.Files, &fds).close()
	if sp := (sandboxParams{r.uid, r.gid, r.flags, r.tmpfsSize}); s.prepZ != z || s.prep != sp {
		if err := z.prepare(r); err != nil {
			unix.Close(outW)
			unix.Close(errW)
			p.release(s)
			return Result{}, errdefs.Internal(err, "prepare sandbox")
		}
		s.prep, s.prepZ = sp, z
	}
	// A run whose context ended before its request goes out never starts.
	// Once sent, the request is the slot's helper's to take, and a prepared
	// helper (real-time while it waits) takes it at once, before the zygote
	// gets to a kill sent after it; so the program waits at the slot's run
	// gate until the send returned, and a run whose context ended by then
	// never starts either (see csrc/fncall).
	if ctx.Err() != nil {
		unix.Close(outW)
		unix.Close(errW)
		p.release(s)
		return canceledUnstarted(), nil
	}
	if e.beforeSend != nil {
		e.beforeSend()
	}
	z.armGate(r.slot)
	t0 := time.Now()
	ch, err := z.start(r, fds)
	canceled := false
	if err == nil {
		if e.afterSend != nil {
			e.afterSend()
		}
		canceled = ctx.Err() != nil
		z.openGate(r.slot, canceled)
	}
	unix.Close(outW)
	unix.Close(errW)
	for _, f := range spec.Files {
		runtime.KeepAlive(f.F)
	}
	runtime.KeepAlive(stdin)
	if err != nil {
		p.release(s)
		return Result{}, errdefs.Internal(err, "start run")
	}

	var res Result
	var killOnce sync.Once
	killed := make(chan string, 1)
	kill := func(why string) {
		killOnce.Do(func() {
			killed <- why
			z.kill(r.id, r.slot)
		})
	}
	if canceled {
		kill("canceled") // before any event: the program's end says killed
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		res.Stdout, res.StdoutOver = e.readCapped(outR, l.Output, func() { kill("output") })
	}()
	go func() {
		defer wg.Done()
		res.Stderr, res.StderrTruncated = e.readCapped(errR, l.Stderr, nil)
	}()
	var timer <-chan time.Time
	if l.Wall > 0 {
		t := time.NewTimer(l.Wall)
		defer t.Stop()
		timer = t.C
	}
	var status syscall.WaitStatus
	var exit, reaped *event
	var setupErr error
	// The answer needs the program's exit (the helper reports it, with the
	// rusage of everything reaped so far) or, when the helper died first, its
	// reaping; the slot goes back to the pool only after the reaping.
	for exit == nil && reaped == nil {
		select {
		case ev := <-ch:
			switch ev.kind {
			case evExit:
				exit = &ev
				res.Wall = time.Since(t0)
			case evSetupErr:
				setupErr = fmt.Errorf("sandbox setup: %s: %s", ev.msg, syscall.Errno(ev.err))
			case evExecErr:
				res.ExecErr = fmt.Sprintf("%s: %s", ev.msg, syscall.Errno(ev.err))
			case evReaped:
				reaped = &ev
			case evTrace:
				e.trace(ctx, r.id, ev.msg)
			}
		case <-timer:
			timer = nil
			kill("wall")
		case <-ctx.Done():
			kill("canceled")
			ctx = context.Background()
		case <-z.dead:
			kill("canceled")
			wg.Wait()
			z.forget(r.id)
			p.release(s)
			return Result{}, errdefs.Internal(z.deadErr(), "fncall zygote died during a run")
		}
	}
	if res.Wall == 0 {
		res.Wall = time.Since(t0)
	}
	// Output ends when the last writer is gone: at the program's exit, or when
	// the helper's exit took the rest of the pid namespace with it.
	readersDone := make(chan struct{})
	go func() { wg.Wait(); close(readersDone) }()
	for done := false; !done; {
		select {
		case <-readersDone:
			done = true
		case ev := <-ch:
			if ev.kind == evReaped {
				reaped = &ev
			}
			if ev.kind == evTrace {
				e.trace(ctx, r.id, ev.msg)
			}
		case <-timer:
			timer = nil
			kill("wall")
		case <-z.dead:
			kill("canceled")
			<-readersDone
			done = true
		}
	}
	select {
	case res.Killed = <-killed:
	default:
	}
	src := reaped
	if exit != nil {
		src = exit
		status = syscall.WaitStatus(exit.status)
	} else {
		status = syscall.WaitStatus(reaped.status)
	}
	res.CPU = time.Duration(src.utimeUs+src.stimeUs) * time.Microsecond
	res.MaxRSS = src.maxRSSKB << 10
	if status.Exited() {
		res.Exited, res.ExitCode = true, status.ExitStatus()
	} else if status.Signaled() {
		res.ExitCode, res.Signal = -1, status.Signal()
	}
	if res.Signal == syscall.SIGKILL || (exit == nil && res.Killed == "") {
		if n, err := s.group.OOMKills(); err == nil {
			res.OOM = n > s.oomKills
			s.oomKills = n
		}
	}
	if setupErr != nil {
		s.prepZ = nil // prepare the slot's next helper explicitly
	}
	e.releaseAfterReap(p, s, z, r.id, ch, reaped != nil)
	switch {
	case setupErr != nil:
		return res, errdefs.Internal(setupErr, "fncall run")
	case exit == nil && res.Killed == "" && !res.OOM:
		return res, errdefs.Internal(fmt.Errorf("sandbox helper ended with %v before the program", status), "fncall run")
	}
	return res, nil
}

// canceledUnstarted is the result of a run canceled before its program
// started: what the zygote reports for a request it dropped from the queue
// (killed "canceled", SIGKILL), nothing run.
func canceledUnstarted() Result {
	return Result{Killed: "canceled", ExitCode: -1, Signal: syscall.SIGKILL}
}

// trace logs a line the zygote's helper sent about run id (only with
// DSEC_FNCALL_TRACE=1, so at info level: whoever set it wants to see them).
func (e *Engine) trace(ctx context.Context, id uint64, msg string) {
	e.log.InfoContext(ctx, "fncall trace", "run", id, "msg", msg)
}

// releaseAfterReap gives the slot back once the run's helper was reaped (its
// pid namespace, and with it every process of the run, is gone).
func (e *Engine) releaseAfterReap(p *pool, s *slot, z *zygote, id uint64, ch chan event, reaped bool) {
	finish := func() {
		z.forget(id)
		p.release(s)
	}
	if reaped {
		finish()
		return
	}
	go func() {
		for {
			select {
			case ev := <-ch:
				if ev.kind == evReaped {
					finish()
					return
				}
			case <-z.dead:
				finish()
				return
			}
		}
	}()
}

// readChunk is the size of one read of a run's output.
const readChunk = 32 << 10

// readCapped reads r to EOF, keeping at most limit bytes; past the limit it calls
// over once and discards the rest.
func (e *Engine) readCapped(r io.Reader, limit int64, over func()) ([]byte, bool) {
	var buf []byte
	c := e.chunks.Get().(*[readChunk]byte)
	defer e.chunks.Put(c)
	chunk := c[:]
	exceeded := false
	for {
		n, err := r.Read(chunk)
		if n > 0 && !exceeded {
			room := limit - int64(len(buf))
			if int64(n) > room {
				buf = append(buf, chunk[:room]...)
				exceeded = true
				if over != nil {
					over()
				}
			} else {
				buf = append(buf, chunk[:n]...)
			}
		}
		if err != nil {
			return buf, exceeded
		}
	}
}

// outputPipe returns a pipe for a run's stdout or stderr: the read end for
// the poller, the write end (blocking, as the program expects) as a bare
// descriptor for the zygote. Fewer system calls than os.Pipe, which makes both
// ends non-blocking and registers both with the poller.
func outputPipe() (*os.File, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, -1, fmt.Errorf("pipe: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETFL, 0); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), p[1], nil
}

// memFile returns a sealed-size memfd holding b, for stdin and files.
func memFile(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	if len(b) > 0 {
		if _, err := f.Write(b); err != nil {
			f.Close()
			return nil, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}
