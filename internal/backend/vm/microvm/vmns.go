package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// A confined QEMU's /dev and cgroup.
//
// /dev: QEMU's mount namespace has a tmpfs of its own on /dev holding only
// the device nodes QEMU opens (vmDevices; /dev/kvm only when the VM runs
// under KVM). The namespace is made on a locked OS thread that unshares its
// mount namespace, mounts that /dev and forks QEMU from there; the thread
// then returns to the host's namespace.
//
// cgroup: every VM QEMU (sandboxes and the VMs snapshots are taken of) is
// moved into a cgroup of its own, <mount>/dsec-vm-<UIDBase>/<VM directory>
// (one parent per driver, as its uid range), with a memory limit of the
// guest's memory plus QEMU's own (vmMemLimit) and a pids limit, so a
// runaway QEMU cannot take the node.

// vmDevices are the device nodes a confined QEMU finds in /dev.
func vmDevices(accel string) []string {
	devs := []string{"null", "zero", "full", "random", "urandom"}
	if accel == "kvm" {
		devs = append(devs, "kvm")
	}
	return devs
}

// startConfined starts cmd, in a mount namespace with the minimal /dev
// when QEMU is confined.
func (d *Driver) startConfined(cmd *exec.Cmd, accel string) error {
	if !d.confined() {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread goes back to the pool only in the host's mount
		// namespace; otherwise it ends with this goroutine (a locked
		// thread's goroutine that exits takes the thread with it).
		back := false
		defer func() {
			if back {
				runtime.UnlockOSThread()
			}
		}()
		host, err := os.Open("/proc/thread-self/ns/mnt")
		if err != nil {
			errc <- fmt.Errorf("microvm: mount namespace: %w", err)
			return
		}
		defer host.Close()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("microvm: unshare mount namespace: %w", err)
			return
		}
		err = func() error {
			if err := minimalDev(vmDevices(accel)); err != nil {
				return err
			}
			return cmd.Start()
		}()
		back = unix.Setns(int(host.Fd()), unix.CLONE_NEWNS) == nil
		errc <- err
	}()
	return <-errc
}

// minimalDev, in a mount namespace of its own, stops mount propagation to
// the host and mounts a tmpfs on /dev with copies of the host's nodes devs.
func minimalDev(devs []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("microvm: private mounts: %w", err)
	}
	type node struct {
		name     string
		mode     uint32
		rdev     uint64
		uid, gid uint32
	}
	var nodes []node
	for _, n := range devs {
		var st unix.Stat_t
		if err := unix.Stat("/dev/"+n, &st); err != nil {
			return fmt.Errorf("microvm: /dev/%s: %w", n, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return fmt.Errorf("microvm: /dev/%s is not a character device", n)
		}
		nodes = append(nodes, node{n, st.Mode, st.Rdev, st.Uid, st.Gid})
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC,
		"mode=0755,size=64k,nr_inodes=32"); err != nil {
		return fmt.Errorf("microvm: mount /dev: %w", err)
	}
	for _, n := range nodes {
		p := "/dev/" + n.name
		if err := unix.Mknod(p, n.mode, int(n.rdev)); err != nil {
			return fmt.Errorf("microvm: mknod %s: %w", p, err)
		}
		if err := unix.Chown(p, int(n.uid), int(n.gid)); err != nil {
			return fmt.Errorf("microvm: chown %s: %w", p, err)
		}
		if err := unix.Chmod(p, n.mode&0o7777); err != nil {
			return fmt.Errorf("microvm: chmod %s: %w", p, err)
		}
	}
	return unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_RDONLY, "")
}

// vmPidsMax bounds a VM QEMU's tasks (its vCPU, I/O and worker threads;
// -sandbox spawn=deny already rules out processes).
const vmPidsMax = 512

// vmMemLimit is a VM QEMU's memory limit: the guest's memory, an eighth
// more, and 1 GiB for QEMU itself (TCG's translation cache grows to up to
// 1 GiB).
func vmMemLimit(memMiB int64) int64 { return (memMiB + memMiB/8 + 1024) << 20 }

// cgroupsFor detects the host's cgroups for the driver's VMs (nil, logged,
// where that fails: VMs then run without a cgroup of their own).
func (d *Driver) cgroupsFor() *cgroups.Hierarchy {
	if !d.confined() {
		return nil
	}
	h, err := cgroups.Detect("/sys/fs/cgroup", cgroups.WithParent(vmCgroupParent(d.cfg.UIDBase)))
	if err != nil {
		d.log.Warn("microvm: no cgroups for VMs: QEMU runs without memory and pids limits of its own", "err", err)
		return nil
	}
	return h
}

// vmCgroupParent is the cgroup parent of the VMs of the uid range at base.
func vmCgroupParent(base uint32) string { return fmt.Sprintf("dsec-vm-%d", base) }

// releaseRangeCgroups removes the cgroups of a released uid range at base
// (no process runs under its uids): its VMs' empty groups and the parent.
// A host without cgroups has none to remove.
func releaseRangeCgroups(base uint32) error {
	h, err := cgroups.Detect("/sys/fs/cgroup", cgroups.WithParent(vmCgroupParent(base)))
	if err != nil {
		return nil
	}
	defer h.Close()
	return removeVMCgroups(h)
}

// removeVMCgroups deletes h's groups, then h's parent.
func removeVMCgroups(h *cgroups.Hierarchy) error {
	names, err := h.List("")
	if err != nil {
		return err
	}
	for _, name := range names {
		g, err := h.Open(name)
		if err != nil {
			continue
		}
		if procs, err := g.Procs(); err != nil || len(procs) > 0 {
			return fmt.Errorf("microvm: VM cgroup %s still has processes %v (%v)", name, procs, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = g.Delete(ctx)
		cancel()
		if err != nil {
			return err
		}
	}
	return h.RemoveParent()
}

// pruneCgroups removes the driver's VM cgroups that no process is in and
// whose VM directory is gone: left by VMs killed without a Destroy (a
// snapshot's VM dies with the process that took it), or by a state
// directory whose uid range, and so cgroup parent, this driver now holds.
// A group whose directory exists may be a VM's being started: it stays.
func (d *Driver) pruneCgroups(ctx context.Context) {
	if d.cg == nil {
		return
	}
	names, err := d.cg.List("")
	if err != nil {
		d.log.Warn("microvm: list VM cgroups", "err", err)
		return
	}
	for _, name := range names {
		parent, base, ok := strings.Cut(name, "-")
		if ok && (parent == "vms" || parent == "snapshots") {
			if _, err := os.Stat(filepath.Join(d.cfg.StateDir, parent, base)); err == nil {
				continue
			}
		}
		g, err := d.cg.Open(name)
		if err != nil {
			continue
		}
		if procs, err := g.Procs(); err != nil || len(procs) > 0 {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := g.Delete(dctx); err != nil {
			d.log.Warn("microvm: remove a stale VM cgroup", "cgroup", name, "err", err)
		}
		cancel()
	}
}

// vmCgroupName is the cgroup of the VM whose directory is dir:
// vms-<sandbox id>, snapshots-<temporary name>.
func vmCgroupName(dir string) string {
	return filepath.Base(filepath.Dir(dir)) + "-" + filepath.Base(dir)
}

// joinCgroup creates the VM's cgroup and moves pid into it; it returns the
// group's name ("" when VMs have no cgroups).
func (d *Driver) joinCgroup(dir string, memMiB int64, pid int) (string, error) {
	if d.cg == nil {
		return "", nil
	}
	name := vmCgroupName(dir)
	g, err := d.cg.Create(name, cgroups.Limits{MemoryBytes: vmMemLimit(memMiB), PidsMax: vmPidsMax})
	if err != nil {
		// A group left over by a VM of that directory that was killed
		// without a Destroy (its tasks gone with it).
		var err2 error
		if old, oerr := d.cg.Open(name); oerr == nil {
			err2 = old.Delete(context.Background())
		}
		if err2 != nil {
			return "", fmt.Errorf("microvm: VM cgroup: %w", err)
		}
		if g, err = d.cg.Create(name, cgroups.Limits{MemoryBytes: vmMemLimit(memMiB), PidsMax: vmPidsMax}); err != nil {
			return "", fmt.Errorf("microvm: VM cgroup: %w", err)
		}
	}
	if err := g.AddProc(pid); err != nil {
		_ = g.Delete(context.Background())
		return "", fmt.Errorf("microvm: VM cgroup: %w", err)
	}
	return name, nil
}

// removeCgroup deletes the VM cgroup name after its QEMU is gone.
func (d *Driver) removeCgroup(ctx context.Context, name string) error {
	if d == nil || d.cg == nil || name == "" {
		return nil
	}
	g, err := d.cg.Open(name)
	if err != nil {
		if errdefs.CodeOf(err) == api.CodeNotFound {
			return nil
		}
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := g.Delete(ctx); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("microvm: remove VM cgroup: %w", err)
	}
	return nil
}
