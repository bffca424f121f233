package microvm

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// baseArgs is the QEMU command line shared by sandboxes, the floor and the
// probe: the microvm machine, the kernel and the initramfs, no firmware
// devices, no display.
func (d *Driver) baseArgs(accel string, vcpus int, memMiB int64) []string {
	cpu := "max"
	if accel == "kvm" {
		cpu = "host"
	}
	return []string{
		"-M", "microvm,accel=" + accel,
		"-cpu", cpu,
		"-smp", itoa(vcpus),
		"-m", fmt.Sprintf("%dM", memMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", d.kernel, "-initrd", d.initrd,
	}
}

// cmdline is the guest kernel's command line.
func (d *Driver) cmdline(accel string) string {
	// mitigations=off: the guest is one sandbox, its kernel's side-channel
	// defences between its own processes only cost emulated instructions.
	// cryptomgr.notests and the blacklisted initcalls (kprobe tracing, the
	// X.509 list that only checks module signatures, machine-check sysfs)
	// took ~1 s of a 3.7 s TCG boot to init.
	c := "console=ttyS0 quiet panic=-1 8250.nr_uarts=1 mitigations=off audit=0 cryptomgr.notests" +
		" initcall_blacklist=init_kprobe_trace,load_system_certificate_list,mcheck_init_device"
	if d.cfg.Trace > 0 {
		c += fmt.Sprintf(" dsec.trace=%d", d.cfg.Trace)
	}
	if accel == "tcg" && d.tscKHz > 0 {
		// No PIT or HPET to calibrate the TSC against: tell the guest its rate.
		c += fmt.Sprintf(" tsc_early_khz=%d tsc=reliable", d.tscKHz)
	}
	return c
}

// launch is what one sandbox's QEMU needs.
type launch struct {
	accel     string
	vcpus     int
	memMiB    int64
	dir       string
	disk      string
	diskBytes int64
	layers    []string // EROFS images, base first
	// layerRefs, when set, are what QEMU opens for layers (a confined
	// QEMU's /dev/fdset/N: the images are passed as open descriptors).
	layerRefs []string
	host      string // on the kernel command line (Machine launches)
	identHost string // set by the agent after the hello (IDENT)
	noFPR     bool
	logPath   string
	args      []string // a Machine's command line (Config.Machine)
	// transient: QEMU dies with this process (a snapshot's VM), where a
	// sandbox's outlives it for the next agent to re-adopt.
	transient bool
}

func (d *Driver) sandboxArgs(l launch) []string {
	args := d.baseArgs(l.accel, l.vcpus, l.memMiB)
	app := d.cmdline(l.accel) + fmt.Sprintf(" dsec.layers=%d dsec.disk=%d", len(l.layers), l.diskBytes)
	if l.host != "" {
		app += " dsec.hostname=" + l.host
	}
	fpr := "on"
	if l.noFPR {
		fpr = "off"
	}
	args = append(args,
		"-append", app,
		"-serial", "file:"+filepath.Join(l.dir, "console.log"),
		"-qmp", "unix:"+filepath.Join(l.dir, "qmp.sock")+",server=on,wait=off",
		"-chardev", "socket,id=agent,path="+filepath.Join(l.dir, "agent.sock")+",server=on,wait=off",
		// Two ports (0 is reserved for a console): the default 31 made the
		// guest set up 64 virtqueues, ~100–600 ms of virtio_console's load.
		"-device", "virtio-serial-device,max_ports=2",
		"-device", "virtserialport,chardev=agent,name=dsec.agent",
		"-device", "virtio-balloon-device,free-page-reporting="+fpr,
		"-drive", "id=rw,file="+l.disk+",format=raw,if=none,cache=unsafe,discard=unmap",
		"-device", "virtio-blk-device,drive=rw,serial=dsec-rw",
	)
	refs := l.layers
	if l.layerRefs != nil {
		refs = l.layerRefs
	}
	for i, p := range refs {
		args = append(args,
			"-drive", fmt.Sprintf("id=l%d,file=%s,format=raw,if=none,readonly=on", i, p),
			"-device", fmt.Sprintf("virtio-blk-device,drive=l%d,serial=dsec-l%d", i, i))
	}
	return append(args, d.cfg.ExtraArgs...)
}

// makeDisk creates the writable disk: a sparse file of size bytes holding a
// swap area (the guest's writable layer is a tmpfs of that size whose pages
// go out to it; a swap area needs no file-system module in the guest, where
// ext4's took 0.2-1 s of every TCG boot). The disk does not outlive its VM.
func makeDisk(ctx context.Context, path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	if _, err := f.WriteAt(swapHeader(size), 0); err != nil {
		return err
	}
	return f.Close()
}

// swapHeader is the first page of a Linux swap area (version 1, mkswap's
// layout) covering size bytes: version, last page and no bad pages at 1024,
// the magic at the page's end.
func swapHeader(size int64) []byte {
	const page = 4096
	h := make([]byte, page)
	binary.LittleEndian.PutUint32(h[1024:], 1)
	binary.LittleEndian.PutUint32(h[1028:], uint32(size/page-1))
	copy(h[page-10:], "SWAPSPACE2")
	return h
}

// startQEMU starts QEMU in a session of its own (it outlives this process)
// and returns the command, already started, and its cgroup's name.
func (d *Driver) startQEMU(l launch, snap *os.File) (*exec.Cmd, string, error) {
	cmd, err := d.execQEMU(l, snap)
	if err != nil {
		return nil, "", err
	}
	cg, err := d.joinCgroup(l.dir, l.memMiB, cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", err
	}
	return cmd, cg, nil
}

// execQEMU starts l's QEMU, confined unless the driver is not.
func (d *Driver) execQEMU(l launch, snap *os.File) (*exec.Cmd, error) {
	logf, err := os.OpenFile(l.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	uid, err := d.allocUID(l.dir)
	if err != nil {
		return nil, err
	}
	if err := giveFiles(l.dir, uid, d.gid(), d.confined()); err != nil {
		return nil, err
	}
	// fd 3 is the state directory (confined), fd 4 the snapshot, fd 5 on
	// the layer images (confined).
	var layerFiles []*os.File
	defer func() {
		for _, f := range layerFiles {
			f.Close()
		}
	}()
	var addFD []string
	if d.confined() && l.args == nil {
		l.layerRefs = nil
		for i, p := range l.layers {
			f, err := os.Open(p)
			if err != nil {
				return nil, fmt.Errorf("layer image: %w", err)
			}
			layerFiles = append(layerFiles, f)
			l.layerRefs = append(l.layerRefs, fmt.Sprintf("/dev/fdset/%d", i+1))
			addFD = append(addFD, "-add-fd", fmt.Sprintf("fd=%d,set=%d", 5+i, i+1))
		}
	}
	args := l.args
	if args == nil {
		args = append(d.sandboxArgs(l), addFD...)
	}
	if snap != nil {
		// The migration stream is read from the snapshot file.
		args = append(args[:len(args):len(args)], "-incoming", "fd:4")
	}
	attr := &syscall.SysProcAttr{Setsid: true}
	args, dirf, err := d.confineCmd(args, uid, attr)
	if err != nil {
		return nil, err
	}
	if dirf != nil {
		defer dirf.Close()
	} else {
		// Unconfined: fd 3 is still taken, so the snapshot stays fd 4.
		dirf = os.Stdin
	}
	extra := []*os.File{dirf, snap}
	if snap == nil {
		extra[1] = dirf
	}
	extra = append(extra, layerFiles...)
	cmd := exec.Command(d.cfg.QEMU, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = attr
	if l.transient {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := d.startConfined(cmd, l.accel); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	return cmd, nil
}

// giveFiles gives dir's files (the writable disk, a machine's overlay) to
// the VM's uid.
func giveFiles(dir string, uid, gid uint32, confined bool) error {
	if !confined {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Lchown(filepath.Join(dir, e.Name()), int(uid), int(gid)); err != nil {
			return fmt.Errorf("microvm: give %s to the VM: %w", e.Name(), err)
		}
	}
	return nil
}

// waitFile waits until p exists.
func waitFile(ctx context.Context, p string, done <-chan struct{}) error {
	for {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return errdefs.New(api.CodeSandboxGone, "qemu exited")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// alive reports whether pid is still the process that started at start.
func alive(pid int, start uint64) bool { return initproto.Alive(pid, start) }

// watchPid closes done when pid (not our child) exits.
func watchPid(pid int, start uint64, done chan struct{}) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil || !alive(pid, start) {
		if err == nil {
			unix.Close(fd)
		}
		close(done)
		return
	}
	go func() {
		defer unix.Close(fd)
		defer close(done)
		for {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, -1)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n > 0 {
				return
			}
		}
	}()
}

// killWait SIGKILLs pid (if it still is the process that started at start)
// and waits until it has been reaped, bounded by ctx. Dead is not enough: a
// killed QEMU stays a zombie, with its pid, until its parent waits for it
// (our cmd.Wait goroutine, or init for a QEMU that an earlier agent process
// started), and a caller told "destroyed" must find no such process.
func killWait(ctx context.Context, pid int, start uint64) error {
	if alive(pid, start) {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	for !reaped(pid, start) {
		select {
		case <-ctx.Done():
			return errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "microvm: waiting for qemu (pid %d) to be reaped", pid)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// reaped reports whether the process pid that started at start is gone
// from the process table (not even a zombie is left of it).
func reaped(pid int, start uint64) bool {
	st, err := initproto.ReadStartTime(pid)
	return err != nil || st != start
}
