package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/backend/vm/guest"
	"github.com/dsec-dev/dsec/internal/backend/vm/qmp"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// instance is one running microVM.
type instance struct {
	d     *Driver
	id    string
	st    state
	accel api.VMAccel
	done  chan struct{}

	// pauseMu orders Pause, Resume and the file requests that let a paused
	// VM run for their duration.
	pauseMu sync.Mutex
	mu      sync.Mutex
	cl      *guest.Client
	qm      *qmp.Conn
	paused  bool
	gone    bool
	// hostTrace is the boot's host-side steps (Config.Trace).
	hostTrace string
	// restored: started from a snapshot, not booted.
	restored bool
}

// Start implements driver.Driver: the boot pipeline is disk, layers, QEMU,
// QMP, agent; a failed step undoes the ones before it. A microVM whose
// launch has a snapshot (snapshot.go) is restored from it instead of booted;
// one that has none is booted and a snapshot of its launch is taken in the
// background for the next one.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (_ driver.Instance, err error) {
	tl := newTimeline()
	vcpus, memMiB, disk, err := d.limits(spec)
	if err != nil {
		return nil, err
	}
	m := d.cfg.Machine
	if m != nil {
		if err := m.Check(ctx, spec); err != nil {
			return nil, err
		}
	} else if len(spec.Layers) == 0 {
		return nil, errdefs.Invalid("microvm: no layers")
	}
	var imgs []string
	for _, l := range spec.Layers {
		if m != nil {
			break
		}
		p, err := d.layers.image(ctx, l)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, p)
	}
	a := d.Accel(ctx)
	tl.mark("layers")
	dir := d.vmDir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, errdefs.New(api.CodeAlreadyExists, "microvm: sandbox %s exists", spec.ID)
		}
		return nil, errdefs.Internal(err, "microvm: state dir")
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	l := launch{accel: a.Accel, vcpus: vcpus, memMiB: memMiB, dir: dir, layers: imgs, diskBytes: disk,
		host: hostname(spec), noFPR: d.cfg.NoFreePageReporting, logPath: filepath.Join(dir, "qemu.log")}
	if m != nil {
		if l.args, err = m.Args(ctx, spec, l.Launch()); err != nil {
			return nil, err
		}
	} else {
		// The host name is the agent's to set (IDENT after the hello): a
		// snapshot's clones share one kernel command line.
		l.identHost, l.host = l.host, ""
		l.disk = filepath.Join(dir, "disk.raw")
		if err := makeDisk(ctx, l.disk, disk); err != nil {
			return nil, errdefs.Internal(err, "microvm: writable disk")
		}
	}
	tl.mark("disk")
	key := ""
	if m == nil && !d.cfg.NoSnapshots {
		key = d.snaps.key(d, l)
	}
	if snap := d.snaps.open(key); snap != nil {
		in, err := d.launchVM(ctx, spec.ID, a, l, snap, tl)
		snap.Close()
		if err == nil || ctx.Err() != nil {
			return in, err
		}
		// A snapshot this QEMU cannot load (or a clone that did not
		// answer) is dropped; the sandbox boots instead.
		d.log.Warn("microvm: restore from snapshot failed; booting", "id", spec.ID, "err", err)
		d.snaps.drop(key)
		for _, f := range []string{"qmp.sock", "agent.sock", "console.log", "qemu.pid"} {
			_ = os.Remove(filepath.Join(dir, f))
		}
		tl = newTimeline()
	}
	in, err := d.launchVM(ctx, spec.ID, a, l, nil, tl)
	if err == nil && key != "" {
		d.snaps.buildLater(d, key, l)
	}
	return in, err
}

// launchVM starts QEMU for l (restoring snap when it is not nil) and waits
// for the guest agent's hello; a failure kills QEMU.
func (d *Driver) launchVM(ctx context.Context, id string, a AccelInfo, l launch, snap *os.File, tl *timeline) (_ *instance, err error) {
	cmd, cg, err := d.startQEMU(l, snap)
	if err != nil {
		return nil, errdefs.Internal(err, "microvm")
	}
	tl.mark("qemu_started")
	pid := cmd.Process.Pid
	startTime, _ := initproto.ReadStartTime(pid)
	in := &instance{d: d, id: id, accel: a, done: make(chan struct{}), st: state{PID: pid, StartTime: startTime, Dir: l.dir,
		QMP: filepath.Join(l.dir, "qmp.sock"), Agent: filepath.Join(l.dir, "agent.sock"), Accel: a.Accel,
		Confined: d.confined(), Cgroup: cg}}
	if snap != nil {
		in.restored = true
		in.accel.Reason += "; restored from a snapshot"
	}
	go func() {
		_ = cmd.Wait()
		close(in.done)
	}()
	defer func() {
		if err != nil {
			in.Release()
			_ = killWait(context.Background(), pid, startTime)
			<-in.done
			_ = d.removeCgroup(context.Background(), cg)
		}
	}()
	// The boot is bounded by BootTimeout, not the caller's deadline alone:
	// a create's HTTP context may have none.
	ctx, cancel := context.WithTimeout(ctx, BootTimeout)
	defer cancel()
	if err := waitFile(ctx, in.st.QMP, in.done); err != nil {
		return nil, in.bootErr(err)
	}
	tl.mark("qmp_sock")
	if snap != nil {
		if err := in.awaitRestore(ctx); err != nil {
			return nil, in.bootErr(err)
		}
		// QMP takes one client at a time: as after a boot, the
		// instance holds none until it needs one (a re-adopting agent
		// must be able to connect).
		in.Release()
		tl.mark("restored")
	}
	if err := waitFile(ctx, in.st.Agent, in.done); err != nil {
		return nil, in.bootErr(err)
	}
	tl.mark("agent_sock")
	if _, err := in.client(ctx); err != nil {
		return nil, in.bootErr(err)
	}
	tl.mark("hello")
	if l.identHost != "" || snap != nil {
		if err := in.ident(ctx, l.identHost, snap != nil); err != nil {
			return nil, in.bootErr(err)
		}
		tl.mark("ident")
	}
	if d.cfg.Trace > 0 {
		in.hostTrace = tl.String()
		d.log.Debug("microvm boot", "id", id, "host_ms", in.hostTrace)
	}
	return in, nil
}

// bootErr describes a failed boot with the tail of the guest's console.
func (in *instance) bootErr(err error) error {
	b, _ := os.ReadFile(filepath.Join(in.st.Dir, "console.log"))
	q, _ := os.ReadFile(filepath.Join(in.st.Dir, "qemu.log"))
	tail := strings.TrimSpace(string(b) + string(q))
	if len(tail) > 600 {
		tail = tail[len(tail)-600:]
	}
	if errdefs.CodeOf(err) == api.CodeDeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		return errdefs.Wrap(api.CodeDeadlineExceeded, err, "microvm: guest did not come up (%s; console: %q)", in.guestState(), tail)
	}
	return errdefs.Internal(err, "microvm: boot failed (console: %q)", tail)
}

// guestStateTimeout bounds guestState's questions to QEMU.
const guestStateTimeout = 5 * time.Second

// guestState says where a guest that did not come up is: QEMU's run state
// and each vCPU's instruction pointer (the monitor's "info registers"), so
// a boot that hangs can be placed, e.g. in the guest kernel or in firmware.
func (in *instance) guestState() string {
	ctx, cancel := context.WithTimeout(context.Background(), guestStateTimeout)
	defer cancel()
	q, err := in.qmpConn(ctx)
	if err != nil {
		return "QEMU state unknown: " + err.Error()
	}
	status, err := q.Status(ctx)
	if err != nil {
		return "QEMU state unknown: " + err.Error()
	}
	out := "QEMU " + status
	raw, err := q.Execute(ctx, "human-monitor-command", map[string]any{"command-line": "info registers -a"})
	var regs string
	if err == nil && json.Unmarshal(raw, &regs) == nil {
		if cpus := vcpuPlaces(regs); cpus != "" {
			out += ", " + cpus
		}
	}
	return out
}

// vcpuPlaces picks each vCPU's instruction pointer (RIP, or EIP before
// long mode) and halt flag out of the monitor's "info registers -a".
func vcpuPlaces(regs string) string {
	var cpus []string
	for _, f := range strings.Fields(regs) {
		switch {
		case strings.HasPrefix(f, "CPU#"):
			cpus = append(cpus, "vCPU"+strings.TrimPrefix(f, "CPU#"))
		case len(cpus) == 0:
		case strings.HasPrefix(f, "RIP="), strings.HasPrefix(f, "EIP="), strings.HasPrefix(f, "HLT="):
			cpus[len(cpus)-1] += " " + f
		}
	}
	return strings.Join(cpus, ", ")
}

func hostname(spec driver.Spec) string {
	h := spec.Hostname
	if h == "" {
		h = spec.ID
	}
	if len(h) > 63 || strings.ContainsAny(h, " \t\n") {
		h = spec.ID
	}
	return h
}

// Recover implements driver.Driver.
func (d *Driver) Recover(ctx context.Context, spec driver.Spec, raw json.RawMessage) (driver.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, errdefs.Invalid("microvm: bad state: %v", err)
	}
	if st.PID <= 0 || !alive(st.PID, st.StartTime) {
		return nil, errdefs.NotFound("microvm: sandbox %s: its VM is gone", spec.ID)
	}
	in := &instance{d: d, id: spec.ID, st: st, done: make(chan struct{}),
		accel: api.VMAccel{Accel: st.Accel, Reason: "re-adopted"}}
	if a := d.Accel(ctx); a.Accel == st.Accel {
		in.accel = a
	}
	watchPid(st.PID, st.StartTime, in.done)
	q, err := in.qmpConn(ctx)
	if err != nil {
		return nil, err
	}
	status, err := q.Status(ctx)
	if err != nil {
		return nil, errdefs.Internal(err, "microvm: query status")
	}
	in.paused = status == "paused"
	// The agent's chardev takes one client: a previous agent process may
	// still hold it (hung, or in tests alive). Moving the chardev to a fresh
	// socket drops that client, and the guest agent starts over on HELLO.
	if err := in.takeOver(ctx, q); err != nil {
		return nil, err
	}
	// A paused guest cannot answer: the agent connects on first use after Resume.
	if !in.paused {
		if _, err := in.client(ctx); err != nil {
			return nil, err
		}
	}
	return in, nil
}

func (in *instance) ID() string             { return in.id }
func (in *instance) State() json.RawMessage { return in.st.raw() }
func (in *instance) Done() <-chan struct{}  { return in.done }

// VMAccel reports how the guest runs.
func (in *instance) VMAccel() *api.VMAccel { a := in.accel; return &a }

func (in *instance) goneErr() error {
	return errdefs.New(api.CodeSandboxGone, "sandbox %s: its VM has exited", in.id)
}

// client returns the agent connection, connecting (again) if needed.
func (in *instance) client(ctx context.Context) (*guest.Client, error) {
	if driver.Exited(in) {
		return nil, in.goneErr()
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.gone {
		return nil, in.goneErr()
	}
	if in.cl != nil {
		select {
		case <-in.cl.Done():
			in.cl = nil
		default:
			return in.cl, nil
		}
	}
	// Connect waits for the guest's hello: the boot, or a paused guest's
	// resume, bounded by ctx (or the VM's exit).
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-in.done:
			cancel()
		case <-cctx.Done():
		}
	}()
	cl, err := guest.Connect(cctx, in.st.Agent)
	if err != nil {
		if driver.Exited(in) {
			return nil, in.goneErr()
		}
		if ctx.Err() != nil {
			return nil, errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "microvm: waiting for the guest agent")
		}
		return nil, errdefs.Internal(err, "microvm: connect to the guest agent")
	}
	in.cl = cl
	return cl, nil
}

func (in *instance) qmpConn(ctx context.Context) (*qmp.Conn, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.qm != nil {
		return in.qm, nil
	}
	q, err := qmp.DialUntil(ctx, in.st.QMP, in.done)
	if err != nil {
		if driver.Exited(in) {
			return nil, in.goneErr()
		}
		return nil, errdefs.Internal(err, "microvm: qmp")
	}
	in.qm = q
	return q, nil
}

// channel opens a channel to the agent.
func (in *instance) channel(ctx context.Context) (*guest.Chan, error) {
	cl, err := in.client(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := cl.Open()
	if err != nil {
		return nil, in.connErr(err)
	}
	return ch, nil
}

// connErr classifies a failure on the agent connection.
func (in *instance) connErr(err error) error {
	if driver.Exited(in) {
		return in.goneErr()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return errdefs.Wrap(api.CodeDeadlineExceeded, err, "microvm: guest agent")
	}
	if errdefs.CodeOf(err) != "" && errdefs.CodeOf(err) != api.CodeInternal {
		return err
	}
	return errdefs.Internal(err, "microvm: guest agent")
}

// call runs one request on a fresh channel and returns the reply; the
// channel is closed.
func (in *instance) call(ctx context.Context, p *initproto.Packet) (*initproto.Packet, error) {
	ch, err := in.channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	r, err := ch.Call(ctx, p)
	if err != nil {
		return nil, in.connErr(err)
	}
	return r, nil
}

// Pause implements driver.Pauser (QMP stop: the vCPUs stop).
func (in *instance) Pause(ctx context.Context) error { return in.runState(ctx, "stop", true) }

// Resume implements driver.Pauser (QMP cont).
func (in *instance) Resume(ctx context.Context) error { return in.runState(ctx, "cont", false) }

func (in *instance) runState(ctx context.Context, cmd string, paused bool) error {
	if driver.Exited(in) {
		return in.goneErr()
	}
	in.pauseMu.Lock()
	defer in.pauseMu.Unlock()
	in.mu.Lock()
	was := in.paused
	in.mu.Unlock()
	if was == paused {
		return nil
	}
	q, err := in.qmpConn(ctx)
	if err != nil {
		return err
	}
	if paused {
		// Freeze the sandbox's processes first (the guest's cgroup freezer),
		// so a file request that lets the vCPUs run meanwhile moves nothing.
		if r, err := in.call(ctx, initproto.NewPacket("FREEZE")); err != nil {
			return err
		} else if r.Op != "OK" {
			return replyErr("freeze", r)
		}
	}
	if _, err := q.Execute(ctx, cmd, nil); err != nil {
		return errdefs.Internal(err, "microvm: %s", cmd)
	}
	if !paused {
		if r, err := in.call(ctx, initproto.NewPacket("THAW")); err != nil {
			return err
		} else if r.Op != "OK" {
			return replyErr("thaw", r)
		}
	}
	in.mu.Lock()
	in.paused = paused
	in.mu.Unlock()
	return nil
}

// MemoryUsage implements driver.Stats: the QEMU process's resident memory
// on the host (what the VM costs), not the guest's own view.
func (in *instance) MemoryUsage() (int64, error) { return in.procKB("status", "VmRSS:") }

// procKB reads a "KEY: N kB" line of /proc/PID/file of the QEMU process.
func (in *instance) procKB(file, key string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(in.st.PID) + "/" + file)
	if err != nil {
		return 0, in.goneErr()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("microvm: %s %q: %w", key, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("microvm: no %s in /proc/%d/%s", key, in.st.PID, file)
}

// Dial implements driver.Instance: the agent connects to 127.0.0.1:port in
// the guest and relays the bytes over its channel.
func (in *instance) Dial(ctx context.Context, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, errdefs.Invalid("port %d out of range", port)
	}
	ch, err := in.channel(ctx)
	if err != nil {
		return nil, err
	}
	r, err := ch.Call(ctx, initproto.NewPacket("DIAL").Add("port", strconv.Itoa(port)))
	if err != nil {
		ch.Close()
		return nil, in.connErr(err)
	}
	if r.Op != "OK" {
		ch.Close()
		return nil, replyErr("dial port "+strconv.Itoa(port), r)
	}
	return chanConn(ch), nil
}

// chanConn turns a dialled channel into a net.Conn (through net.Pipe, which
// gives deadlines).
func chanConn(ch *guest.Chan) net.Conn {
	mine, theirs := net.Pipe()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := ch.Stream(1).Read(buf)
			if n > 0 {
				if _, werr := mine.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		mine.Close()
		ch.Close()
	}()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := mine.Read(buf)
			if n > 0 {
				if _, werr := ch.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				_ = ch.CloseWrite()
				break
			}
		}
	}()
	return theirs
}

// Destroy implements driver.Instance: QEMU is killed (the guest and every
// process in it with it) and reaped, and the VM's directory (disk, sockets,
// logs) removed. It returns when no QEMU process is left, or with
// deadline_exceeded when ctx ends first.
func (in *instance) Destroy(ctx context.Context) error {
	in.mu.Lock()
	in.gone = true
	in.mu.Unlock()
	in.Release()
	if err := killWait(ctx, in.st.PID, in.st.StartTime); err != nil {
		return err
	}
	select {
	case <-in.done:
	case <-ctx.Done():
		return errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "microvm: waiting for qemu to exit")
	}
	if err := in.d.removeCgroup(ctx, in.st.Cgroup); err != nil {
		return errdefs.Internal(err, "microvm: destroy")
	}
	if err := os.RemoveAll(in.st.Dir); err != nil {
		return errdefs.Internal(err, "microvm: remove %s", in.st.Dir)
	}
	return nil
}

// FS implements driver.Instance.
func (in *instance) FS(ctx context.Context) (session.FS, error) {
	if _, err := in.client(ctx); err != nil {
		return nil, err
	}
	return &vmFS{in: in}, nil
}

// thawed runs fn with the VM's vCPUs running: a paused VM is continued for
// fn (the guest agent keeps the sandbox's processes frozen) and stopped
// again after it.
func (in *instance) thawed(ctx context.Context, fn func() error) error {
	in.pauseMu.Lock()
	defer in.pauseMu.Unlock()
	in.mu.Lock()
	paused := in.paused
	in.mu.Unlock()
	if !paused {
		return fn()
	}
	q, err := in.qmpConn(ctx)
	if err != nil {
		return err
	}
	if _, err := q.Execute(ctx, "cont", nil); err != nil {
		return errdefs.Internal(err, "microvm: cont")
	}
	defer func() { _, _ = q.Execute(context.WithoutCancel(ctx), "stop", nil) }()
	return fn()
}

// takeOver points the agent's chardev at a new socket (QMP chardev-change).
func (in *instance) takeOver(ctx context.Context, q *qmp.Conn) error {
	old := in.st.Agent
	p := filepath.Join(in.st.Dir, fmt.Sprintf("agent-%d.sock", time.Now().UnixNano()%1e9))
	backend := map[string]any{"type": "socket", "data": map[string]any{
		"addr":   map[string]any{"type": "unix", "data": map[string]any{"path": in.QEMUPath(p)}},
		"server": true, "wait": false,
	}}
	if _, err := q.Execute(ctx, "chardev-change", map[string]any{"id": "agent", "backend": backend}); err != nil {
		return errdefs.Internal(err, "microvm: take over the agent channel")
	}
	in.st.Agent = p
	if old != p {
		_ = os.Remove(old)
	}
	return nil
}

// ProportionalMemory is the QEMU process's PSS: its resident memory with
// pages shared with other VMs (the kernel image, layer pages in the page
// cache) divided among them.
func (in *instance) ProportionalMemory() (int64, error) { return in.procKB("smaps_rollup", "Pss:") }

// HostTrace returns the boot's host-side steps (Config.Trace): "step=ms"
// pairs, ms since Start was called.
func (in *instance) HostTrace() string { return in.hostTrace }

// Trace returns the guest agent's timelines (Config.Trace) printed so far:
// "step=ms" pairs in guest uptime, one line per traced exec, the first
// with the boot.
func (in *instance) Trace() []string {
	b, _ := os.ReadFile(filepath.Join(in.st.Dir, "console.log"))
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if _, t, ok := strings.Cut(line, "dsec-vmagent: trace: "); ok {
			out = append(out, strings.TrimSpace(t))
		}
	}
	return out
}

// timeline records when each step of a boot ended (Config.Trace).
type timeline struct {
	t0    time.Time
	marks []string
}

func newTimeline() *timeline { return &timeline{t0: time.Now()} }

func (t *timeline) mark(what string) {
	t.marks = append(t.marks, fmt.Sprintf("%s=%.1f", what, float64(time.Since(t.t0).Microseconds())/1000))
}

func (t *timeline) String() string { return strings.Join(t.marks, " ") }

// awaitRestore waits until QEMU has loaded the snapshot and lets the guest
// run: a snapshot is taken of a stopped guest, which wakes stopped.
func (in *instance) awaitRestore(ctx context.Context) error {
	q, err := in.qmpConn(ctx)
	if err != nil {
		return err
	}
	for {
		st, err := q.Status(ctx)
		if err != nil {
			return errdefs.Internal(err, "microvm: query status while restoring")
		}
		switch st {
		case "inmigrate":
		case "paused", "prelaunch", "postmigrate":
			if _, err := q.Execute(ctx, "cont", nil); err != nil {
				return errdefs.Internal(err, "microvm: cont after restore")
			}
			return nil
		case "running":
			return nil
		default:
			return errdefs.Internal(nil, "microvm: restored guest is %q", st)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-in.done:
			return errdefs.New(api.CodeSandboxGone, "qemu exited while loading the snapshot")
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// ident gives the guest its host name and, for a clone of a snapshot, the
// time and fresh randomness (the agent's IDENT): every clone wakes with the
// snapshot's clock and random number generator state.
func (in *instance) ident(ctx context.Context, host string, restored bool) error {
	p := initproto.NewPacket("IDENT")
	if host != "" {
		p.Add("host", host)
	}
	if restored {
		seed := make([]byte, 64)
		if _, err := rand.Read(seed); err != nil {
			return errdefs.Internal(err, "microvm: seed")
		}
		p.Add("time", strconv.FormatInt(time.Now().UnixNano(), 10)).Add("seed", hex.EncodeToString(seed))
	}
	r, err := in.call(ctx, p)
	if err != nil {
		return err
	}
	if r.Op != "OK" {
		return replyErr("ident", r)
	}
	return nil
}
