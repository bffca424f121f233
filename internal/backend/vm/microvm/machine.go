package microvm

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/vm/qmp"
)

// Machine is another QEMU machine run by this driver (Config.Machine): the
// fullvm backend (internal/backend/vm/fullvm) boots a q35 guest from a disk image
// and reuses the boot pipeline, the agent channel, QMP, pause, delete and
// re-adoption; only the command line and the limits differ.
type Machine interface {
	// Name is the backend name.
	Name() string
	// Capabilities are the backend's.
	Capabilities() driver.Capabilities
	// MinMemory is the smallest guest memory (bytes) that boots.
	MinMemory() int64
	// Check refuses a spec the machine cannot boot (an invalid_argument
	// error), before anything is created.
	Check(ctx context.Context, spec driver.Spec) error
	// Args prepares the sandbox's disks in l.Dir and returns QEMU's whole
	// command line; it must include l.HostArgs().
	Args(ctx context.Context, spec driver.Spec, l Launch) ([]string, error)
}

// Launch is what a Machine gets to build one sandbox's command line.
type Launch struct {
	Accel    string // "kvm" or "tcg"
	VCPUs    int
	MemMiB   int64
	Dir      string // the sandbox's state directory (created, empty)
	Hostname string
	// DiskBytes is the sandbox's writable space (Spec.Disk, at least MinDisk).
	DiskBytes int64
}

// Launch describes l for a Machine.
func (l launch) Launch() Launch {
	return Launch{Accel: l.accel, VCPUs: l.vcpus, MemMiB: l.memMiB, Dir: l.dir, Hostname: l.host, DiskBytes: l.diskBytes}
}

// HostArgs are the arguments the driver relies on, whatever the machine:
// the console log, QMP and the agent's chardev (socket paths in the VM's
// state) and the pid file. The machine adds the virtio-serial port
// "dsec.agent" on chardev "agent" with its own bus's device.
func (l Launch) HostArgs() []string {
	return []string{
		"-serial", "file:" + filepath.Join(l.Dir, "console.log"),
		"-qmp", "unix:" + filepath.Join(l.Dir, "qmp.sock") + ",server=on,wait=off",
		"-chardev", "socket,id=agent,path=" + filepath.Join(l.Dir, "agent.sock") + ",server=on,wait=off",
	}
}

// CPUArgs are the accelerator and CPU model arguments for accel.
func CPUArgs(accel string) []string {
	cpu := "max"
	if accel == "kvm" {
		cpu = "host"
	}
	return []string{"-accel", accel, "-cpu", cpu}
}

// QMP runs fn with the instance's QMP connection (for capabilities a
// Machine adds, such as screenshots and input).
func (in *instance) QMP(ctx context.Context, fn func(*qmp.Conn) error) error {
	q, err := in.qmpConn(ctx)
	if err != nil {
		return err
	}
	if err := fn(q); err != nil {
		return fmt.Errorf("qmp: %w", err)
	}
	return nil
}

// Release drops this process's QMP and agent connections and leaves the VM
// running, as a restarting agent process does (QEMU's QMP socket takes one
// client at a time): a restore lets go of QMP with it, a failed launch and
// Destroy close both, and tests that re-adopt a VM from the same process use it.
func (in *instance) Release() {
	in.mu.Lock()
	cl, q := in.cl, in.qm
	in.cl, in.qm = nil, nil
	in.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
	if q != nil {
		q.Close()
	}
}
