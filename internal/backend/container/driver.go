// Package container is dsec's container backend, built directly on kernel primitives:
// a tiny static C init (internal/backend/initbin) is cloned into new mount, pid, uts, ipc, net
// and cgroup namespaces, mounts an overlay root (read-only lowers + a size-limited
// tmpfs writable layer), pivots into it, drops capabilities, sets no_new_privs and a
// seccomp filter, and then serves exec requests over a unix socket. The driver keeps
// per-sandbox state on local disk so a restarted agent re-adopts running sandboxes.
package container

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/initbin"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/reclaim"
	"github.com/dsec-dev/dsec/internal/seccomp"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Config configures the container driver.
type Config struct {
	// StateDir holds the driver's state on disk (the init binary; per-sandbox
	// directories of earlier builds, released like any other leftover).
	StateDir string
	// RunDir holds the control sockets; it must be short (unix socket paths are
	// limited to 107 bytes). Default: /run/dsec/<hash of StateDir>.
	RunDir string
	// CgroupRoot is where cgroup file systems are mounted (default /sys/fs/cgroup).
	CgroupRoot string
	// CgroupParent is the parent cgroup of this driver's sandboxes; default
	// "dsec-<hash of StateDir>", so two agents on one host never touch each
	// other's sandboxes.
	CgroupParent string
	// Devices are added to every sandbox's /dev and device allowlist
	// (besides DefaultDeviceRules); see ParseDevice.
	Devices []Device
	// UserNS runs sandboxes whose spec does not say otherwise in a user
	// namespace of their own (see IDPool): sandbox root is then an
	// unprivileged host uid.
	UserNS bool
	// IDPool is where user-namespace sandboxes get their host IDs.
	IDPool IDPool
	// Network gives sandboxes egress under a policy; nil: loopback only.
	Network *netpolicy.Manager
	// LSCPUWeight is the cpu weight of CgroupParent (cgroup v2's scale, 100
	// being the default of every group; v1 gets cpu.shares in proportion):
	// 0 means DefaultLSCPUWeight, -1 leaves the kernel's default.
	LSCPUWeight int
	// LSSlice and BESlice are the scheduler slices LS and BE sandboxes'
	// threads ask for (EEVDF, Linux 6.12+): 0 means DefaultLSSlice and
	// DefaultBESlice, -1 the kernel's default.
	LSSlice, BESlice time.Duration
	// NoFavorDynMods leaves a cgroup v1 host's cgroups as they are. By
	// default New turns on the kernel's favordynmods there
	// (cgroups.Hierarchy.FavorDynMods): a sandbox's init then joins its
	// cgroups in about 0.1 ms instead of waiting about 5 ms for an RCU
	// grace period on an idle host.
	NoFavorDynMods bool
	Logger         *slog.Logger
}

// Driver implements driver.Driver for containers.
type Driver struct {
	cfg      Config
	log      *slog.Logger
	initPath string
	// nsInitPath is the init binary for sandboxes in user namespaces, in
	// the run dir: their init resolves its own binary and mountpoints as an
	// unprivileged uid, so those live below a traversable run dir (0711)
	// and the state and data dirs stay 0700.
	nsInitPath string
	cg         *cgroups.Hierarchy
	seccomp    *os.File // sealed memfd with the compiled default profile
	devnull    *os.File // stdin of every exec without one (nil: each opens its own)
	spawner    *initproto.Spawner

	// sysfs is the read-only sysfs shared by all sandboxes (cloned onto
	// their /sys, see initproto.MountSharedSysfs); "" if it could not be
	// mounted, then every init mounts its own.
	sysfs   string
	sysfsMu sync.Mutex // serializes remounting a vanished shared sysfs

	ids *idAlloc
	// usernsErr says why no sandbox can have a user namespace here (nil:
	// they can).
	usernsErr error

	coreSched bool // the kernel has PR_SCHED_CORE (LS sandboxes get a cookie)
	// weighted sets CgroupParent's cpu weight once it exists (qos.go).
	weighted sync.Once
	// runTmpfs: the run dir may be the driver's own tmpfs (see rundir.go),
	// unmounted by Close when no sandbox is left.
	runTmpfs bool
	// unfavor undoes cgroups.Hierarchy.FavorDynMods (nil: not done).
	unfavor func() error
	// weaken is nil except in this package's tests (see weakening).
	weaken func(id string) weakening
}

// DefaultRunDir is the run dir of a driver on stateDir that names none:
// /run/dsec/<hash of stateDir>. It holds each sandbox's control socket,
// ID.sock.
func DefaultRunDir(stateDir string) string { return filepath.Join("/run/dsec", stateTag(stateDir)) }

// stateTag names a driver's host-wide objects (run dir, parent cgroup) after
// its state dir.
func stateTag(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return hex.EncodeToString(sum[:4])
}

// New prepares the driver: installs the init binary, detects cgroups and compiles
// the seccomp profile, all once.
func New(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("container: StateDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	tag := stateTag(cfg.StateDir)
	defaultRun := cfg.RunDir == ""
	if defaultRun {
		cfg.RunDir = DefaultRunDir(cfg.StateDir)
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "dsec-" + tag
	}
	for _, d := range []string{cfg.StateDir, cfg.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
	}
	// mounted only on the default run dir: one the caller chose is theirs
	runTmpfs := false
	if defaultRun {
		var merr error
		if runTmpfs, merr = mountRunTmpfs(cfg.RunDir); merr != nil {
			cfg.Logger.Warn("run dir stays on disk", "err", merr)
		}
	}
	initPath, err := initbin.Install(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("container: install init: %w", err)
	}
	if cfg.LSCPUWeight == 0 {
		cfg.LSCPUWeight = DefaultLSCPUWeight
	}
	if cfg.LSSlice == 0 {
		cfg.LSSlice = DefaultLSSlice
	}
	if cfg.BESlice == 0 {
		cfg.BESlice = DefaultBESlice
	}
	h, err := cgroups.Detect(cfg.CgroupRoot, cgroups.WithSlices(max(cfg.LSSlice, 0), max(cfg.BESlice, 0)))
	if err != nil {
		return nil, fmt.Errorf("container: cgroups: %w", err)
	}
	prog, err := seccomp.Default().Compile()
	if err != nil {
		return nil, fmt.Errorf("container: seccomp: %w", err)
	}
	mfd, err := seccomp.MemFD(prog)
	if err != nil {
		return nil, fmt.Errorf("container: seccomp memfd: %w", err)
	}
	ids, err := newIDAlloc(cfg.IDPool)
	if err != nil {
		mfd.Close()
		return nil, err
	}
	// Inits are cloned from a helper with a tiny descriptor table (see
	// initproto.Spawner); without it, from this process.
	spawner, serr := initproto.StartSpawner(initPath, 0)
	if serr != nil {
		cfg.Logger.Warn("no init spawner; inits are forked from the server", "err", serr)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		mfd.Close()
		spawner.Close()
		return nil, fmt.Errorf("container: %w", err)
	}
	d := &Driver{cfg: cfg, log: cfg.Logger, initPath: initPath, cg: h, seccomp: mfd, devnull: devnull, ids: ids, spawner: spawner,
		coreSched: cgroups.CoreSchedAvailable(), runTmpfs: runTmpfs || (defaultRun && onMemoryFS(cfg.RunDir))}
	// An init in a user namespace resolves its binary and mountpoints in
	// the run dir as an unprivileged uid: make it traversable (not
	// listable; the sockets in it stay 0600).
	if err := searchable(filepath.Dir(cfg.RunDir), defaultRun); err != nil {
		d.usernsErr = err
	} else if err := searchable(cfg.RunDir, true); err != nil {
		d.usernsErr = err
	} else if d.nsInitPath, err = initbin.Install(cfg.RunDir); err != nil {
		d.usernsErr = err
	}
	// One sysfs superblock for all sandboxes instead of one each: every
	// superblock costs per-memcg shrinker memory on the host.
	sysfs := filepath.Join(cfg.RunDir, "sysfs")
	if err := initproto.MountSharedSysfs(sysfs); err != nil {
		d.log.Warn("no shared sysfs; every sandbox mounts its own", "err", err)
	} else {
		d.sysfs = sysfs
	}
	if h.Version() == 1 && !cfg.NoFavorDynMods {
		if d.unfavor, err = h.FavorDynMods(filepath.Join(cfg.RunDir, "favordynmods")); err != nil {
			d.log.Warn("cgroup v1 without favordynmods: each create waits for an RCU grace period to join its cgroups", "err", err)
		} else {
			d.log.Debug("cgroup v1: favordynmods on (host-wide)")
		}
	}
	return d, nil
}

// sharedSysfs returns the shared sysfs path for a new sandbox, mounting it
// again if it vanished (e.g. another driver on the same RunDir closed).
func (d *Driver) sharedSysfs() string {
	if d.sysfs == "" || initproto.SharedSysfsMounted(d.sysfs) {
		return d.sysfs
	}
	d.sysfsMu.Lock()
	defer d.sysfsMu.Unlock()
	if !initproto.SharedSysfsMounted(d.sysfs) {
		if err := initproto.MountSharedSysfs(d.sysfs); err != nil {
			d.log.Warn("remount shared sysfs", "err", err)
			return ""
		}
	}
	return d.sysfs
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "container" }

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Isolation: driver.IsolationNamespaces, Pause: true, TTY: true, Credentials: true, Limits: true,
		Fork: true, Commit: true, // instances are driver.Snapshotters (snapshot.go)
		LayerKinds: []string{driver.LayerDir},
	}
}

// lowerDirs turns layer descriptions into overlayfs lower directories, top-most
// first. The container driver stacks directories: an EROFS layer must be
// mounted first (layerd does that for layered images).
func lowerDirs(layers []driver.Layer) ([]string, error) {
	if len(layers) == 0 {
		return nil, errdefs.Invalid("container: no layers")
	}
	lower := make([]string, 0, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		if l.Kind != driver.LayerDir {
			return nil, errdefs.Invalid("container: layer %d is %q; this driver takes mounted directories", i, l.Kind)
		}
		lower = append(lower, l.Path)
	}
	return lower, nil
}

// CgroupVersion reports 1 or 2.
func (d *Driver) CgroupVersion() int { return d.cg.Version() }

// Close releases driver-wide resources (not the sandboxes, which keep their
// clones of the shared sysfs).
func (d *Driver) Close() error {
	err := errors.Join(d.seccomp.Close(), d.cg.Close(), d.spawner.Close(), d.devnull.Close())
	if d.sysfs != "" {
		d.sysfsMu.Lock()
		err = errors.Join(err, initproto.UnmountSharedSysfs(d.sysfs))
		d.sysfsMu.Unlock()
	}
	// With no sandbox left, leave nothing behind: the parent cgroup and the run
	// dir go (both stay while sandboxes live on for a restarted agent).
	_ = d.cg.RemoveIdleParent(d.cfg.CgroupParent)
	if names, lerr := d.cg.List(d.cfg.CgroupParent); lerr == nil && len(names) == 0 {
		err = errors.Join(err, d.cg.DeleteDevices(d.cfg.CgroupParent))
		if g, oerr := d.cg.Open(d.cfg.CgroupParent); oerr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = errors.Join(err, g.Delete(ctx))
			cancel()
		}
	}
	if d.nsInitPath != "" {
		_ = os.Remove(d.nsInitPath) // running inits need it no more; New installs it again
	}
	if d.unfavor != nil {
		err = errors.Join(err, d.unfavor())
	}
	if d.runTmpfs {
		err = errors.Join(err, unmountRunTmpfs(d.cfg.RunDir))
	}
	_ = os.Remove(d.cfg.RunDir) // fails, harmlessly, while sockets remain
	return err
}

// state is what the driver persists per sandbox (and hands to the agent).
type state struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	Cgroup    string `json:"cgroup"`
	// IDBase is the host uid and gid of sandbox root when the sandbox runs
	// in a user namespace (its range is IDBase..IDBase+IDSize-1); 0: none.
	IDBase uint32 `json:"id_base,omitempty"`
	IDSize uint32 `json:"id_size,omitempty"`
}

// dir is where earlier builds kept a sandbox's init log; release still
// removes it.
func (d *Driver) dir(id string) string    { return filepath.Join(d.cfg.StateDir, id) }
func (d *Driver) socket(id string) string { return filepath.Join(d.cfg.RunDir, id+".sock") }

// nsDir holds the mountpoints of a sandbox in a user namespace (see
// nsInitPath).
func (d *Driver) nsDir(id string) string  { return filepath.Join(d.cfg.RunDir, id+".d") }
func (d *Driver) cgName(id string) string { return d.cfg.CgroupParent + "/" + id }

// Start implements driver.Driver.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	lower, err := lowerDirs(spec.Layers)
	if err != nil {
		return nil, err
	}
	if spec.KSM && !reclaim.KSMAvailable() {
		return nil, errdefs.Invalid("ksm: the host kernel has no KSM (/sys/kernel/mm/ksm)")
	}
	var idmap *initproto.IDMap
	// The mountpoints and the init log live in the run dir (a memory file
	// system, see rundir.go): nothing of a sandbox is created on disk.
	mnt, initPath := d.nsDir(spec.ID), d.initPath
	if d.usesUserNS(spec.ID, spec.UserNS) {
		if d.usernsErr != nil {
			return nil, errdefs.New(api.CodeUnavailable, "container: no user namespaces on this node: %v", d.usernsErr)
		}
		m, err := d.ids.alloc(spec.ID)
		if err != nil {
			return nil, err
		}
		idmap = &m
		mnt, initPath = d.nsDir(spec.ID), d.nsInitPath
	}
	root, rw := filepath.Join(mnt, "root"), filepath.Join(mnt, "rw")
	err = os.MkdirAll(root, 0o755)
	if err == nil {
		err = os.Mkdir(rw, 0o700)
	}
	if err != nil {
		os.RemoveAll(mnt)
		if idmap != nil {
			d.ids.free(idmap.HostID, spec.ID)
		}
		return nil, errdefs.Internal(err, "create sandbox dir")
	}
	freeIDs := func() {
		if idmap != nil {
			d.ids.free(idmap.HostID, spec.ID)
		}
	}
	idle := spec.CPUClass == api.CPUClassBE
	// The CPU limit is written before the first exec (instance.applyCPU),
	// not here: it costs a walk over every CPU cgroup of the host, and an
	// idle init needs none. Validated now all the same.
	if err := (cgroups.Limits{CPU: spec.CPU}).Validate(); err != nil {
		freeIDs()
		os.RemoveAll(mnt)
		return nil, err
	}
	// On cgroup v2 the init is cloned straight into its cgroup, which must
	// exist first; on v1 it joins after the clone (BeforeStart), so the
	// cgroup is made while the spawner clones the init.
	v2 := d.cg.Version() == 2
	pcg := d.makeCgroup(spec.ID, cgroups.Limits{MemoryBytes: spec.Memory,
		PidsMax: spec.PidsMax, Devices: d.devicePolicy(spec.ID), Idle: idle}, !v2)
	if v2 {
		if _, err := pcg.wait(); err != nil {
			freeIDs()
			os.RemoveAll(mnt)
			return nil, err
		}
	}
	fail := func(err error) (driver.Instance, error) {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if cg, cerr := pcg.wait(); cerr == nil {
			_ = cg.Kill()
			_ = cg.Delete(dctx)
		}
		os.RemoveAll(mnt)
		_ = os.Remove(d.socket(spec.ID)) // an init that got as far as listening
		freeIDs()
		return nil, err
	}
	cgfd := -1
	if v2 {
		cg, _ := pcg.wait()
		if fd, err := cg.Dir(); err == nil {
			cgfd = fd
			defer closeFD(fd)
		}
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	sec := d.security(spec.ID)
	sec.AllowSetuid = spec.AllowSetuid
	// An egress policy's link is made in the init's network namespace while
	// the init sets up its mounts (startNetwork).
	var netDone <-chan error
	in, err := initproto.Spawn(ctx, initproto.SpawnConfig{
		InitPath:   initPath,
		Hostname:   hostname,
		RootDir:    root,
		RWDir:      rw,
		RWSize:     spec.Disk,
		Lower:      lower,
		SysfsPath:  d.sharedSysfs(),
		SocketPath: d.socket(spec.ID),
		Spawner:    d.spawner,
		Seccomp:    d.seccompFor(spec.ID),
		Security:   &sec,
		LogPath:    filepath.Join(mnt, "init.log"),
		CgroupFD:   cgfd,
		UserNS:     idmap,
		KSM:        spec.KSM,
		BeforeStart: func(pid int) error {
			cg, err := pcg.wait()
			if err != nil {
				return err
			}
			if cgfd < 0 {
				if err := cg.AddProc(pid); err != nil {
					return err
				}
			}
			if err := d.applyCPUClass(pid, idle); err != nil {
				return err
			}
			netDone, err = d.startNetwork(ctx, spec, pid)
			return err
		},
	})
	if netDone != nil {
		// Apply's error is the policy's own (nothing of it is left); a
		// policy applied to an init that then failed is released.
		nerr := <-netDone
		if err == nil && nerr != nil {
			killAndReap(in.PID)
			return fail(nerr)
		}
		if err != nil && nerr == nil {
			_ = d.cfg.Network.Release(context.WithoutCancel(ctx), spec.ID)
		}
	}
	cg, cerr := pcg.wait()
	if cerr != nil {
		return fail(cerr) // the init, if cloned, was killed when it could not join
	}
	if err != nil {
		return fail(classifySpawn(err))
	}
	st := state{PID: in.PID, StartTime: in.StartTime, Cgroup: d.cgName(spec.ID)}
	if idmap != nil {
		st.IDBase, st.IDSize = idmap.HostID, idmap.Size
	}
	inst, err := d.newInstance(spec, st, cg, true)
	if err != nil {
		killAndReap(in.PID)
		return fail(errdefs.Internal(err, "watch init"))
	}
	return inst, nil
}

// pendingCgroup is a sandbox's cgroup being made, maybe in the background.
type pendingCgroup struct {
	done chan struct{}
	g    *cgroups.Group
	err  error
}

// makeCgroup makes the cgroup of sandbox id with limits l, in a goroutine
// when async; wait has the outcome (an error already classified).
func (d *Driver) makeCgroup(id string, l cgroups.Limits, async bool) *pendingCgroup {
	p := &pendingCgroup{done: make(chan struct{})}
	mk := func() {
		defer close(p.done)
		if p.g, p.err = d.cg.Create(d.cgName(id), l); p.err != nil {
			p.err = errdefs.Internal(p.err, "create cgroup")
		}
	}
	if async {
		go mk()
	} else {
		mk()
	}
	return p
}

func (p *pendingCgroup) wait() (*cgroups.Group, error) {
	<-p.done
	return p.g, p.err
}

// classifySpawn maps init setup failures: a full writable layer or bad lower dirs
// are still infrastructure from the caller's view, except a cancelled context.
func classifySpawn(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errdefs.Wrap("deadline_exceeded", err, "start sandbox")
	}
	return errdefs.Internal(err, "start sandbox")
}

// Recover implements driver.Driver.
func (d *Driver) Recover(ctx context.Context, spec driver.Spec, raw json.RawMessage) (driver.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, errdefs.Internal(err, "parse sandbox state")
	}
	if !initproto.Alive(st.PID, st.StartTime) {
		return nil, errdefs.NotFound("sandbox %s: init %d is gone", spec.ID, st.PID)
	}
	cg, err := d.cg.Open(st.Cgroup)
	if err != nil {
		return nil, errdefs.Internal(err, "open cgroup")
	}
	d.ids.mark(st.IDBase, spec.ID)
	return d.newInstance(spec, st, cg, false)
}

// Cleanup implements driver.Driver: it kills a still-running init (e.g. one whose
// record was lost half-way through create) and releases cgroup and directories.
func (d *Driver) Cleanup(ctx context.Context, spec driver.Spec, raw json.RawMessage) error {
	var st state
	if len(raw) > 0 && json.Unmarshal(raw, &st) == nil && st.PID > 0 && initproto.Alive(st.PID, st.StartTime) {
		_ = killPID(st.PID)
	}
	err := d.release(ctx, spec.ID)
	d.ids.free(st.IDBase, spec.ID)
	return err
}

func (d *Driver) release(ctx context.Context, id string) error {
	var errs []error
	if cg, err := d.cg.Open(d.cgName(id)); err == nil {
		_ = cg.Kill()
		if err := cg.Delete(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if d.cfg.Network != nil {
		if err := d.cfg.Network.Release(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(d.socket(id))
	for _, dir := range []string{d.dir(id), d.nsDir(id)} {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Sweep releases sandboxes this driver knows of (directories, cgroups) that are not
// in keep: leftovers of a create that crashed before the agent recorded it.
func (d *Driver) Sweep(ctx context.Context, keep map[string]bool) {
	seen := map[string]bool{}
	if ents, err := os.ReadDir(d.cfg.StateDir); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				seen[e.Name()] = true
			}
		}
	}
	if names, err := d.cg.List(d.cfg.CgroupParent); err == nil {
		for _, n := range names {
			seen[strings.TrimPrefix(n, d.cfg.CgroupParent+"/")] = true
		}
	}
	// A sandbox of this build leaves its mountpoint directory (ID.d, with the
	// init log) and socket (ID.sock) in the run dir; the run dir's own
	// entries (the shared sysfs, the init binary) have neither suffix.
	if ents, err := os.ReadDir(d.cfg.RunDir); err == nil {
		for _, e := range ents {
			n := e.Name()
			if id, ok := strings.CutSuffix(n, ".sock"); ok && !e.IsDir() {
				seen[id] = true
			} else if id, ok := strings.CutSuffix(n, ".d"); ok && e.IsDir() {
				seen[id] = true
			}
		}
	}
	for id := range seen {
		if keep[id] {
			continue
		}
		d.log.Warn("releasing unrecorded sandbox", "id", id)
		if err := d.release(ctx, id); err != nil {
			d.log.Warn("release leftover", "id", id, "err", err)
		}
	}
	if d.cfg.Network != nil {
		d.cfg.Network.Sweep(ctx, keep)
	}
}
