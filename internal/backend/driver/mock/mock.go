// Package mock is a driver for tests that runs without root and without images:
// a sandbox is a directory on the host (its "root"; directory layers are copied
// into it), its processes are plain host processes of the calling user with their
// working directory inside that root, files go through internal/fsops on the
// root (so paths resolve inside it exactly as in a container), terminals come
// from the host's /dev/ptmx through the same procio code the container driver
// uses, and Dial reaches the host's loopback. There is no isolation, and the
// Capabilities say so (Isolation none, no credentials, limits or pause), so the
// conformance suite skips those checks. In rooted mode (Config.Chroot, as
// root) processes run chrooted into the sandbox's root with the credentials
// they ask for, and the driver claims Credentials (see root.go). With
// Config.Egress it keeps the network policies it is given, enforcing none
// (see network.go).
//
// A Host plays the part the container driver's init processes play: it holds the
// sandboxes, their processes and the masters of tagged terminals, and outlives
// Driver instances, so a "restarted agent" (a new Driver on the same Host)
// recovers sandboxes and re-attaches to background processes.
package mock

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/session/hostfs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Name is the mock's backend name.
const Name = "mock"

// Host is the machine the mock sandboxes run on; share one between the Driver
// instances of a test.
type Host struct {
	mu    sync.Mutex
	boxes map[string]*box
}

// NewHost returns an empty host.
func NewHost() *Host { return &Host{boxes: map[string]*box{}} }

// Config configures a mock driver.
type Config struct {
	Host *Host
	// StateDir holds one root directory per sandbox.
	StateDir string
	// BackendName overrides Name (to register a second mock backend).
	BackendName string
	// NoTTY drops the TTY capability (to test how callers refuse terminals).
	NoTTY bool
	// Screen, if not zero, gives every sandbox a display of that size: the
	// driver claims Capabilities.Screenshot and Screenshot returns a generated
	// PNG (see screen.go).
	Screen image.Point
	// Pause claims the Pause capability: instances stop and continue their
	// processes (see pause.go).
	Pause bool
	// Chroot runs every process chrooted into its sandbox's root with the
	// credentials it asks for (rooted mode, see root.go; needs root). The
	// driver then claims the Credentials capability.
	Chroot bool
	// Egress keeps the network policies sandboxes are given and reports them,
	// enforcing nothing (see network.go).
	Egress bool
}

// Driver implements driver.Driver with host processes.
type Driver struct{ cfg Config }

// New returns a driver on cfg.Host.
func New(cfg Config) (*Driver, error) {
	if cfg.Host == nil || cfg.StateDir == "" {
		return nil, fmt.Errorf("mock: Host and StateDir are required")
	}
	if cfg.Chroot && os.Geteuid() != 0 {
		return nil, errdefs.New(api.CodePermissionDenied, "mock: rooted mode (Chroot) needs root")
	}
	if cfg.BackendName == "" {
		cfg.BackendName = Name
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("mock: %w", err)
	}
	return &Driver{cfg: cfg}, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return d.cfg.BackendName }

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Isolation: driver.IsolationNone, TTY: !d.cfg.NoTTY, LayerKinds: []string{driver.LayerDir},
		Screenshot: d.cfg.Screen != image.Point{}, Pause: d.cfg.Pause, Credentials: d.cfg.Chroot}
}

type state struct {
	Root string `json:"root"`
}

// Start implements driver.Driver.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	if spec.ID == "" || filepath.Base(spec.ID) != spec.ID {
		return nil, errdefs.Invalid("mock: bad sandbox id %q", spec.ID)
	}
	root := filepath.Join(d.cfg.StateDir, spec.ID)
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, errdefs.Internal(err, "mock: create sandbox root")
	}
	fail := func(err error) (driver.Instance, error) {
		os.RemoveAll(root)
		return nil, err
	}
	for _, l := range spec.Layers {
		if l.Kind != driver.LayerDir {
			return fail(errdefs.Invalid("mock: layer kind %q; this driver takes directories", l.Kind))
		}
		if err := copyTree(l.Path, root); err != nil {
			return fail(errdefs.Internal(err, "mock: copy layer %s", l.Path))
		}
	}
	for _, dir := range []string{"tmp", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			return fail(errdefs.Internal(err, "mock: create sandbox dirs"))
		}
	}
	b := &box{id: spec.ID, root: root, done: make(chan struct{}), procs: map[string]*hostProc{}, running: map[*hostProc]bool{}}
	h := d.cfg.Host
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := h.boxes[spec.ID]; dup {
		return fail(errdefs.New(api.CodeAlreadyExists, "mock: sandbox %s exists", spec.ID))
	}
	h.boxes[spec.ID] = b
	return d.instance(b), nil
}

func (d *Driver) instance(b *box) driver.Instance {
	raw, _ := json.Marshal(state{Root: b.root})
	in := &instance{d: d, b: b, raw: raw}
	if d.cfg.Pause {
		return pausable{in}
	}
	return in
}

// Recover implements driver.Driver.
func (d *Driver) Recover(ctx context.Context, spec driver.Spec, raw json.RawMessage) (driver.Instance, error) {
	h := d.cfg.Host
	h.mu.Lock()
	b := h.boxes[spec.ID]
	h.mu.Unlock()
	if b == nil || b.exited() {
		return nil, errdefs.NotFound("mock: sandbox %s is gone", spec.ID)
	}
	return d.instance(b), nil
}

// Cleanup implements driver.Driver.
func (d *Driver) Cleanup(ctx context.Context, spec driver.Spec, raw json.RawMessage) error {
	h := d.cfg.Host
	h.mu.Lock()
	b := h.boxes[spec.ID]
	h.mu.Unlock()
	if b != nil {
		return b.destroy(ctx, h)
	}
	var st state
	if json.Unmarshal(raw, &st) == nil && st.Root != "" && filepath.Dir(st.Root) == d.cfg.StateDir {
		return os.RemoveAll(st.Root)
	}
	return nil
}

// box is one sandbox on the host.
type box struct {
	id, root string
	done     chan struct{}

	mu        sync.Mutex
	procs     map[string]*hostProc // tagged processes, running or exited
	running   map[*hostProc]bool
	destroyed bool
	// closeDone closes done once: at destroy, or earlier when the init
	// exits (see exit.go).
	closeDone sync.Once
	// thaw is open while the box is paused (see pause.go).
	thaw chan struct{}
	// network is the policy kept with Config.Egress (nil: loopback only).
	network *api.NetworkStatus
}

func (b *box) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// destroy kills every process, waits for them and removes the root.
func (b *box) destroy(ctx context.Context, h *Host) error {
	b.mu.Lock()
	first := !b.destroyed
	b.destroyed = true
	if b.thaw != nil { // a paused box's waiting execs see it destroyed
		close(b.thaw)
		b.thaw = nil
	}
	procs := make([]*hostProc, 0, len(b.running))
	for p := range b.running {
		procs = append(procs, p)
	}
	b.mu.Unlock()
	if !first {
		<-b.done
		return nil
	}
	for _, p := range procs {
		p.kill()
	}
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-ctx.Done():
			return errdefs.Internal(ctx.Err(), "mock: wait for processes")
		case <-time.After(10 * time.Second):
			return errdefs.Internal(fmt.Errorf("pid %d", p.pid), "mock: a process did not die")
		}
	}
	b.mu.Lock()
	for _, p := range b.procs {
		p.releaseMaster()
	}
	b.mu.Unlock()
	h.mu.Lock()
	delete(h.boxes, b.id)
	h.mu.Unlock()
	err := os.RemoveAll(b.root)
	b.closeDone.Do(func() { close(b.done) })
	return err
}

// instance is a driver's handle on a box.
type instance struct {
	d   *Driver
	b   *box
	raw json.RawMessage
}

func (in *instance) ID() string             { return in.b.id }
func (in *instance) State() json.RawMessage { return in.raw }
func (in *instance) Done() <-chan struct{}  { return in.b.done }

func (in *instance) gone() error {
	return errdefs.New(api.CodeSandboxGone, "sandbox %s has been destroyed", in.b.id)
}

// FS implements driver.Instance.
func (in *instance) FS(ctx context.Context) (session.FS, error) {
	if in.b.exited() {
		return nil, in.gone()
	}
	f, err := os.OpenFile(in.b.root, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, errdefs.Internal(err, "mock: open sandbox root")
	}
	return hostfs.New(fsops.New(f)), nil
}

// Dial implements driver.Instance: the host's loopback.
func (in *instance) Dial(ctx context.Context, port int) (net.Conn, error) {
	if in.b.exited() {
		return nil, in.gone()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, errdefs.Wrap(api.CodeBadGateway, err, "dial port %d in the sandbox", port)
	}
	return c, nil
}

// Destroy implements driver.Instance.
func (in *instance) Destroy(ctx context.Context) error { return in.b.destroy(ctx, in.d.cfg.Host) }
