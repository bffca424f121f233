// Package microvm is the "microvm" backend: every sandbox is a QEMU `-M
// microvm` guest booting Debian's kernel (installed by scripts/setup.sh into
// /var/lib/dsec/vm, never on the host) into dsec-vmagent (csrc/vmagent) as
// its init, from a small initramfs this package writes once per agent binary.
//
// Root file system: each read-only layer is attached as a read-only virtio
// block device holding an EROFS image (EROFS layers as they are, directory
// layers converted once with mkfs.erofs into a cache shared by every VM, so
// the host page cache holds one copy); the writable upper is a tmpfs of the
// sandbox's disk size paged out to a sparse swap file of that size; the agent
// overlays them inside the guest.
// virtio-pmem with DAX would map the layers without a guest page-cache copy;
// QEMU 7.2 has it only as a PCI device, which on microvm needs pcie=on and
// the guest's PCI and nvdimm modules: not done yet, block devices it is.
//
// The host reaches the agent over a virtio-serial port (a unix socket on the
// host; there is no vhost-vsock here) with internal/backend/vm/guest's framing of
// initproto packets, and QEMU itself over QMP (internal/backend/vm/qmp): pause and
// resume are stop/cont. Memory is returned to the host by virtio-balloon's
// free page reporting. QEMU runs in its own session, so it survives an agent
// restart; its pid, start time and socket paths are the sandbox's state, from
// which Recover re-adopts it.
//
// Acceleration: KVM only when a probe guest actually boots under it within a
// timeout (a nested PVM /dev/kvm hangs stock guests), else TCG; the probe
// runs once per host boot and its result (with the reason) is cached.
package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Name is the backend name.
const Name = api.BackendMicroVM

// Defaults and bounds.
const (
	DefaultVMDir = "/var/lib/dsec/vm"
	// DefaultAccelCache is on /run: a new boot starts without it.
	DefaultAccelCache = "/run/dsec/vm-accel.json"
	// MinMemory is the smallest guest that boots the kernel, the agent and a
	// shell with room to work.
	MinMemory = 128 << 20
	// MaxMemory bounds one guest.
	MaxMemory = 64 << 30
	// BootTimeout bounds a boot (TCG on a loaded host takes tens of seconds).
	BootTimeout = 3 * time.Minute
	// MinDisk is the smallest writable disk.
	MinDisk = 16 << 20
	// MaxDisk is the largest (a swap area's page count is 32 bits; the
	// guest's tmpfs and swap map grow with it).
	MaxDisk = 1 << 40
)

// Config configures the driver.
type Config struct {
	// StateDir holds one directory per VM, the initramfs and the layer cache.
	StateDir string
	// VMDir holds the guest kernel and modules (scripts/setup.sh); default
	// DefaultVMDir.
	VMDir string
	// QEMU is the qemu-system-x86_64 binary (default: found on PATH).
	QEMU string
	// Accel forces "kvm" or "tcg"; "" (auto) probes KVM once per host boot.
	Accel string
	// AccelCache is where the probe's result is kept for this host boot
	// (default DefaultAccelCache; every driver on the host shares it).
	AccelCache string
	// NoFreePageReporting turns virtio-balloon's free page reporting off
	// (for measuring what it saves).
	NoFreePageReporting bool
	// Machine, when set, replaces the microvm machine (the fullvm backend,
	// internal/backend/vm/fullvm); the agent channel, QMP, pause and re-adoption
	// stay this driver's.
	Machine Machine
	// Trace makes the guest agent keep a timeline of its boot and of its
	// first Trace execs and print it on the console (Instance.Trace), and
	// the driver log each boot's host-side steps at debug level: for
	// finding where a boot's time goes. It adds dsec.trace=N to the kernel
	// command line (the floor's too).
	Trace int
	// NoSnapshots boots every VM: no snapshots are taken or restored
	// (snapshot.go).
	NoSnapshots bool
	// MaxSnapshots is how many launches keep a snapshot (default
	// DefaultMaxSnapshots); the least recently used go first.
	MaxSnapshots int
	// UIDBase is the group QEMU runs in and, plus one, the first of the
	// per-VM uids (confine.go). Unset, the driver claims a range of its own
	// in UIDRegistry (uidrange.go); set, it is used as is, unregistered.
	UIDBase uint32
	// UIDRegistry is the host-wide directory of claimed uid ranges
	// (default DefaultUIDRegistry).
	UIDRegistry string
	// Unconfined runs QEMU as this process's user, without -sandbox or
	// namespaces of its own: the weakened VM the escape probes are shown
	// to succeed against, and the baseline of the benchmark.
	Unconfined bool
	// ExtraArgs are appended to every sandbox's QEMU command line: for
	// tests that weaken a VM on purpose (a host file shared as a disk, a
	// network device) to show the VM probes can succeed.
	ExtraArgs []string
	// ExtraGuestModules are kernel modules (.ko paths) the guest loads at
	// boot after its own: for the same tests (a network driver for a
	// network device).
	ExtraGuestModules []string
	Logger            *slog.Logger
}

// Driver is the microvm backend.
type Driver struct {
	cfg     Config
	log     *slog.Logger
	kernel  string
	initrd  string
	layers  *layerCache
	tscKHz  int
	accelMu sync.Mutex
	accel   *AccelInfo
	snaps   *snapStore
	// uidMu serializes picking a VM's uid (allocUID); nextSlot is where
	// the next search starts.
	uidMu    sync.Mutex
	nextSlot uint32
	// cg holds the VMs' cgroups (vmns.go); nil unconfined or where the
	// host's cgroups could not be used.
	cg *cgroups.Hierarchy
}

// New checks that the kernel is installed and writes the initramfs.
func New(cfg Config) (*Driver, error) {
	if cfg.VMDir == "" {
		cfg.VMDir = DefaultVMDir
	}
	if cfg.StateDir == "" {
		return nil, errors.New("microvm: StateDir is required")
	}
	if cfg.AccelCache == "" {
		cfg.AccelCache = DefaultAccelCache
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.QEMU == "" {
		p, err := exec.LookPath("qemu-system-x86_64")
		if err != nil {
			return nil, fmt.Errorf("microvm: qemu-system-x86_64 not found (scripts/setup.sh installs qemu-system-x86): %w", err)
		}
		cfg.QEMU = p
	}
	kernel := filepath.Join(cfg.VMDir, "vmlinux")
	if _, err := os.Stat(kernel); err != nil {
		return nil, fmt.Errorf("microvm: guest kernel missing (run scripts/setup.sh): %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "vms"), 0o700); err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	if cfg.UIDRegistry == "" {
		cfg.UIDRegistry = DefaultUIDRegistry
	}
	claimed := cfg.UIDBase == 0 && !cfg.Unconfined
	if claimed {
		base, err := claimUIDRange(cfg.UIDRegistry, cfg.StateDir, processUIDs, releaseRangeCgroups)
		if err != nil {
			return nil, err
		}
		cfg.UIDBase = base
	}
	initrd, err := writeInitramfs(cfg.StateDir, filepath.Join(cfg.VMDir, "modules"), cfg.ExtraGuestModules)
	if err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, log: cfg.Logger, kernel: kernel, initrd: initrd,
		layers: &layerCache{dir: filepath.Join(cfg.StateDir, "layers")}, tscKHz: hostTSCKHz(),
		snaps: newSnapStore(filepath.Join(cfg.StateDir, "snapshots"), cfg.MaxSnapshots, cfg.Logger)}
	if err := d.prepareShared(); err != nil {
		return nil, err
	}
	d.cg = d.cgroupsFor()
	if claimed {
		// The cgroup parent is this state directory's alone.
		d.pruneCgroups(context.Background())
	}
	return d, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string {
	if d.cfg.Machine != nil {
		return d.cfg.Machine.Name()
	}
	return Name
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	if d.cfg.Machine != nil {
		return d.cfg.Machine.Capabilities()
	}
	return driver.Capabilities{
		Isolation:   driver.IsolationVM,
		Pause:       true,
		TTY:         true,
		Credentials: true,
		LayerKinds:  []string{driver.LayerDir, driver.LayerEROFS},
	}
}

// limits turns the spec's limits into QEMU's, refusing what cannot boot.
func (d *Driver) limits(spec driver.Spec) (vcpus int, memMiB int64, disk int64, err error) {
	minMem, what := int64(MinMemory), "microVM"
	if d.cfg.Machine != nil {
		minMem, what = d.cfg.Machine.MinMemory(), d.cfg.Machine.Name()
	}
	if spec.Memory < minMem {
		return 0, 0, 0, errdefs.Invalid("memory_bytes %d is below the %s minimum of %d (%d MiB)", spec.Memory, what, minMem, minMem>>20)
	}
	if spec.Memory > MaxMemory {
		return 0, 0, 0, errdefs.Invalid("memory_bytes %d is above the microVM maximum of %d", spec.Memory, int64(MaxMemory))
	}
	vcpus = int(spec.CPU + 0.999)
	if vcpus < 1 {
		vcpus = 1
	}
	if vcpus > runtime.NumCPU() {
		vcpus = runtime.NumCPU()
	}
	if spec.Disk > MaxDisk {
		return 0, 0, 0, errdefs.Invalid("disk_bytes %d is above the %s maximum of %d (1 TiB)", spec.Disk, what, int64(MaxDisk))
	}
	disk = spec.Disk
	if disk < MinDisk {
		disk = MinDisk
	}
	return vcpus, spec.Memory >> 20, disk, nil
}

// state is the durable description of one VM (Instance.State).
type state struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	Dir       string `json:"dir"`
	QMP       string `json:"qmp"`
	Agent     string `json:"agent"`
	Accel     string `json:"accel"`
	// Confined: QEMU runs confined (confine.go) and finds the state
	// directory at /proc/self/fd/3 (QEMUPath).
	Confined bool `json:"confined,omitempty"`
	// Cgroup is QEMU's own cgroup (vmns.go), "" for none.
	Cgroup string `json:"cgroup,omitempty"`
}

func (s state) raw() json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// vmDir is where sandbox id's files live.
func (d *Driver) vmDir(id string) string { return filepath.Join(d.cfg.StateDir, "vms", id) }

// Cleanup implements driver.Driver: it kills a QEMU that still runs, waits
// until it has been reaped and removes the VM's directory.
func (d *Driver) Cleanup(ctx context.Context, spec driver.Spec, raw json.RawMessage) error {
	var st state
	_ = json.Unmarshal(raw, &st)
	if st.PID > 0 {
		if err := killWait(ctx, st.PID, st.StartTime); err != nil {
			return err
		}
	}
	if err := d.removeCgroup(ctx, st.Cgroup); err != nil {
		return errdefs.Internal(err, "microvm: cleanup")
	}
	dir := st.Dir
	if dir == "" {
		dir = d.vmDir(spec.ID)
	}
	if err := os.RemoveAll(dir); err != nil {
		return errdefs.Internal(err, "microvm: remove %s", dir)
	}
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// FreePageReporting reports whether guests return freed pages to the host.
func (d *Driver) FreePageReporting() bool { return !d.cfg.NoFreePageReporting }
