package fullvm

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A TCG boot of the desktop takes a minute or more, so the package boots ONE
// full VM and shares it: the conformance suite runs on leases of it (below),
// the display tests and the server test use it directly, and the last test
// destroys it and checks that nothing is left.

var (
	stateDir  string
	bootOnce  sync.Once
	bootErr   error
	bootTook  time.Duration
	sharedMu  sync.Mutex
	sharedVM  driver.Instance // the real instance (replaced by a real Recover)
	sharedDrv *Driver
	sharedSp  driver.Spec
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "dsec-fullvm-test-")
	if err != nil {
		panic(err)
	}
	stateDir = d
	code := m.Run()
	sharedMu.Lock()
	if sharedVM != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = sharedVM.Destroy(ctx)
		cancel()
	}
	sharedMu.Unlock()
	os.RemoveAll(d)
	os.Exit(code)
}

// needVM skips without root or without the base image (scripts/setup.sh).
func needVM(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("fullvm tests need root")
	}
	if err := Available(imagesDir()); err != nil {
		t.Skipf("no fullvm base image (run scripts/setup.sh): %v", err)
	}
}

// imagesDir is where the tests find the desktop image: DSEC_IMAGES_DIR (to
// try a newly built image before it replaces the installed one), else
// DefaultImagesDir.
func imagesDir() string {
	if d := os.Getenv("DSEC_IMAGES_DIR"); d != "" {
		return d
	}
	return DefaultImagesDir
}

func desktopLayers(t testing.TB) []driver.Layer {
	return []driver.Layer{{Kind: driver.LayerDir, Path: filepath.Join(imagesDir(), DefaultImage, "rootfs")}}
}

func newTestDriver(t testing.TB) *Driver {
	t.Helper()
	d, err := New(Config{StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// shared boots the package's VM once and returns it.
func shared(t testing.TB) driver.Instance {
	t.Helper()
	needVM(t)
	bootOnce.Do(func() {
		sharedDrv = newTestDriver(t)
		sharedSp = driver.Spec{ID: "fvshared", Image: DefaultImage, Layers: desktopLayers(t), CPU: 1, Memory: 512 << 20, Disk: 1536 << 20}
		t0 := time.Now()
		inst, err := sharedDrv.Start(context.Background(), sharedSp)
		bootTook = time.Since(t0)
		if err != nil {
			bootErr = err
			return
		}
		sharedVM = inst
		t.Logf("fullvm: booted to the agent in %v", bootTook)
	})
	if bootErr != nil {
		t.Fatalf("boot the shared full VM: %v", bootErr)
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return sharedVM
}

// leaseDriver hands out leases of the shared VM as "sandboxes": Start checks
// the spec with the real driver (bad layers fail as they would) and returns a
// lease; a lease's Destroy ends the lease (Done closes, calls fail with
// sandbox_gone, a paused VM is resumed), Recover re-adopts the real VM with a
// fresh driver (QMP and the agent channel are taken over for real) unless the
// lease was destroyed. Tags are prefixed with the lease ID so leases do not
// see each other's processes.
type leaseDriver struct{ real *Driver }

type leaseState struct {
	once   sync.Once
	done   chan struct{}
	paused bool
}

var (
	leasesMu sync.Mutex
	leases   = map[string]*leaseState{}
)

type lease struct {
	id string
	st *leaseState
}

type leaseRecord struct {
	Lease string          `json:"lease"`
	VM    json.RawMessage `json:"vm"`
}

func (l leaseDriver) Name() string                      { return l.real.Name() }
func (l leaseDriver) Capabilities() driver.Capabilities { return l.real.Capabilities() }

func (l leaseDriver) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	if err := l.real.m.Check(ctx, spec); err != nil {
		return nil, err
	}
	if _, _, _, err := limitsCheck(spec); err != nil {
		return nil, err
	}
	st := &leaseState{done: make(chan struct{})}
	leasesMu.Lock()
	leases[spec.ID] = st
	leasesMu.Unlock()
	return &lease{id: spec.ID, st: st}, nil
}

// limitsCheck applies the real driver's memory floor to a lease.
func limitsCheck(spec driver.Spec) (int, int64, int64, error) {
	if spec.Memory < MinMemory {
		return 0, 0, 0, errdefs.Invalid("memory below the fullvm minimum")
	}
	return 0, 0, 0, nil
}

func (l leaseDriver) Recover(ctx context.Context, spec driver.Spec, raw json.RawMessage) (driver.Instance, error) {
	var r leaseRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, errdefs.Invalid("bad lease state: %v", err)
	}
	leasesMu.Lock()
	st := leases[r.Lease]
	leasesMu.Unlock()
	if st == nil || closed(st.done) {
		return nil, errdefs.NotFound("lease %s is gone", r.Lease)
	}
	d2, err := New(Config{StateDir: stateDir})
	if err != nil {
		return nil, err
	}
	// The previous agent process "dies": it lets go of QMP and the channel.
	sharedMu.Lock()
	sharedVM.(interface{ Release() }).Release()
	sharedMu.Unlock()
	inst, err := d2.Recover(ctx, sharedSp, r.VM)
	if err != nil {
		return nil, err
	}
	sharedMu.Lock()
	sharedVM = inst
	sharedMu.Unlock()
	return &lease{id: r.Lease, st: st}, nil
}

func (l leaseDriver) Cleanup(ctx context.Context, spec driver.Spec, raw json.RawMessage) error {
	return nil
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (l *lease) vm() (driver.Instance, error) {
	if closed(l.st.done) {
		return nil, errdefs.New(api.CodeSandboxGone, "lease %s destroyed", l.id)
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return sharedVM, nil
}

func (l *lease) ID() string { return l.id }
func (l *lease) State() json.RawMessage {
	sharedMu.Lock()
	vm := sharedVM.State()
	sharedMu.Unlock()
	b, _ := json.Marshal(leaseRecord{Lease: l.id, VM: vm})
	return b
}
func (l *lease) Done() <-chan struct{} { return l.st.done }

func (l *lease) Exec(ctx context.Context, p driver.ProcSpec, stdio driver.Stdio) (driver.Proc, error) {
	vm, err := l.vm()
	if err != nil {
		return nil, err
	}
	if p.Tag != "" {
		p.Tag = l.id + "-" + p.Tag
	}
	return vm.Exec(ctx, p, stdio)
}

func (l *lease) Attach(ctx context.Context, tag string, stdio driver.Stdio) (driver.Proc, error) {
	vm, err := l.vm()
	if err != nil {
		return nil, err
	}
	return vm.Attach(ctx, l.id+"-"+tag, stdio)
}

func (l *lease) FS(ctx context.Context) (session.FS, error) {
	vm, err := l.vm()
	if err != nil {
		return nil, err
	}
	return vm.FS(ctx)
}

func (l *lease) Dial(ctx context.Context, port int) (net.Conn, error) {
	vm, err := l.vm()
	if err != nil {
		return nil, err
	}
	return vm.Dial(ctx, port)
}

func (l *lease) Pause(ctx context.Context) error {
	vm, err := l.vm()
	if err != nil {
		return err
	}
	if err := vm.(driver.Pauser).Pause(ctx); err != nil {
		return err
	}
	l.st.paused = true
	return nil
}

func (l *lease) Resume(ctx context.Context) error {
	vm, err := l.vm()
	if err != nil {
		return err
	}
	if err := vm.(driver.Pauser).Resume(ctx); err != nil {
		return err
	}
	l.st.paused = false
	return nil
}

func (l *lease) Destroy(ctx context.Context) error {
	var err error
	l.st.once.Do(func() {
		if l.st.paused {
			sharedMu.Lock()
			vm := sharedVM
			sharedMu.Unlock()
			err = vm.(driver.Pauser).Resume(ctx)
			l.st.paused = false
		}
		close(l.st.done)
	})
	return err
}
