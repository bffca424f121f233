package microvm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// QEMU's confinement: every QEMU this driver starts (sandboxes, snapshots,
// the KVM probe and the boot floor) runs
//   - under QEMU's own seccomp filter (-sandbox): no obsolete system calls,
//     no set*uid/capability changes, no fork/exec, no scheduler or CPU
//     affinity changes;
//   - as an unprivileged user: a uid of its own per VM (UIDBase+1+slot) and
//     the driver's shared group (UIDBase), with no capabilities, from a
//     range no other driver on the host uses (uidrange.go); the VM's
//     directory and disk are that uid's, the read-only files every VM
//     shares (initramfs, layer images) are the group's, nothing else of
//     the state directory is reachable (it is handed to QEMU as a
//     descriptor, /proc/self/fd/3, so the directories above it need not
//     be);
//   - in mount, PID, IPC, UTS and network namespaces of its own: a VM has
//     no network device (the agent channel is virtio-serial), so QEMU needs
//     no network at all.
//
// /dev/kvm is opened by the unprivileged user: it works where the device is
// group-accessible (the usual root:kvm 0660) and the group is added; where
// it is root's alone the KVM probe fails and VMs run under TCG.

// SandboxArg is QEMU's -sandbox setting. spawn=deny rules out exec:
// migration URIs (snapshots are written to a descriptor instead) and
// -daemonize (not used).
const SandboxArg = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"

// DefaultUIDBase is the first host uid (and the group) of the first VM uid
// range (uidrange.go): above the ranges distributions hand out and the
// 16-bit ranges user namespaces commonly map.
const DefaultUIDBase = 0x6d000000

// UIDSlots is how many VMs one driver can run at once, each under a uid of
// its own.
const UIDSlots = 1 << 16

// stateFD is the descriptor number QEMU finds the state directory at.
const stateFD = 3

// confined reports whether QEMU is confined (Config.Unconfined is the
// switch tests and the benchmark's baseline use).
func (d *Driver) confined() bool { return !d.cfg.Unconfined }

// gid is the group every VM of this driver runs in.
func (d *Driver) gid() uint32 { return d.cfg.UIDBase }

// prepareShared makes the state directory's shared parts reachable by the
// VMs' group and nothing else: the directories traversable (0710), the
// initramfs readable.
func (d *Driver) prepareShared() error {
	if !d.confined() {
		return nil
	}
	for _, p := range []string{d.cfg.StateDir, filepath.Join(d.cfg.StateDir, "vms"),
		filepath.Join(d.cfg.StateDir, "layers"), filepath.Join(d.cfg.StateDir, "snapshots")} {
		if err := os.MkdirAll(p, 0o710); err != nil {
			return err
		}
		if err := shareWithGroup(p, d.gid(), 0o710); err != nil {
			return err
		}
	}
	return shareWithGroup(d.initrd, d.gid(), 0o640)
}

// shareWithGroup makes p root's and gid's with mode.
func shareWithGroup(p string, gid uint32, mode os.FileMode) error {
	if err := os.Lchown(p, 0, int(gid)); err != nil {
		return fmt.Errorf("microvm: confine %s: %w", p, err)
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("microvm: confine %s: %w", p, err)
	}
	return nil
}

// allocUID picks a uid no VM directory under the driver's vms/ and
// snapshots/ is owned by, and gives dir (created, empty) to it. It holds
// uidMu: two launches never pick the same uid.
func (d *Driver) allocUID(dir string) (uint32, error) {
	if !d.confined() {
		return 0, nil
	}
	d.uidMu.Lock()
	defer d.uidMu.Unlock()
	used := map[uint32]bool{}
	for _, parent := range []string{filepath.Join(d.cfg.StateDir, "vms"), filepath.Join(d.cfg.StateDir, "snapshots")} {
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil || !fi.IsDir() {
				continue
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				used[st.Uid] = true
			}
		}
	}
	for i := uint32(0); i < UIDSlots; i++ {
		uid := d.cfg.UIDBase + 1 + (d.nextSlot+i)%UIDSlots
		if used[uid] {
			continue
		}
		if err := os.Chown(dir, int(uid), int(d.gid())); err != nil {
			return 0, fmt.Errorf("microvm: give %s to uid %d: %w", dir, uid, err)
		}
		d.nextSlot = (d.nextSlot + i + 1) % UIDSlots
		return uid, nil
	}
	return 0, fmt.Errorf("microvm: all %d VM uids from %d are in use", UIDSlots, d.cfg.UIDBase+1)
}

// confineCmd turns QEMU's command line and process attributes into the
// confined ones for a VM running as uid: the -sandbox flag, paths under the
// state directory rewritten to its descriptor, the credentials and the
// namespaces. It returns the arguments and the state directory's
// descriptor (the caller passes it as fd 3 and closes it after the start).
func (d *Driver) confineCmd(args []string, uid uint32, attr *syscall.SysProcAttr) ([]string, *os.File, error) {
	if !d.confined() {
		return args, nil, nil
	}
	dirf, err := os.Open(d.cfg.StateDir)
	if err != nil {
		return nil, nil, fmt.Errorf("microvm: state directory: %w", err)
	}
	out := make([]string, 0, len(args)+2)
	for _, a := range args {
		out = append(out, d.qemuPath(a))
	}
	out = append(out, "-sandbox", SandboxArg)
	cred := &syscall.Credential{Uid: uid, Gid: d.gid()}
	if g, ok := kvmGroup(); ok {
		cred.Groups = []uint32{g}
	}
	attr.Credential = cred
	attr.Cloneflags |= syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC |
		syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET
	return out, dirf, nil
}

// qemuPath rewrites the state directory's paths in s to where a confined
// QEMU finds them (its descriptor).
func (d *Driver) qemuPath(s string) string {
	prefix := filepath.Clean(d.cfg.StateDir) + "/"
	return strings.ReplaceAll(s, prefix, fmt.Sprintf("/proc/self/fd/%d/", stateFD))
}

// QEMUPath is the path under which this instance's QEMU reaches the host
// path p (in the VM's directory), for QMP commands that name a file.
func (in *instance) QEMUPath(p string) string {
	if !in.st.Confined {
		return p
	}
	return in.d.qemuPath(p)
}

// kvmGroup is /dev/kvm's group when the group may open it.
func kvmGroup() (uint32, bool) {
	fi, err := os.Stat("/dev/kvm")
	if err != nil || fi.Mode().Perm()&0o060 != 0o060 {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Gid == 0 {
		return 0, false
	}
	return st.Gid, true
}
