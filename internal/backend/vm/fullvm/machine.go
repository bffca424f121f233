package fullvm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/vm/microvm"
	"github.com/dsec-dev/dsec/internal/errdefs"
)

// boot is an image's fullvm/boot.json (scripts/fullvm-image.sh).
type boot struct {
	KernelRelease string `json:"kernel_release"`
	Kernel        string `json:"kernel"`
	Initrd        string `json:"initrd"`
	Disk          string `json:"disk"`
	Root          string `json:"root"`
	// Desktop "panel": the image draws a desktop with a panel, and Start
	// returns once a screenshot shows it (DesktopShown). Empty: Start
	// returns when the guest agent answers.
	Desktop string `json:"desktop"`
	dir     string
}

func (b boot) path(name string) string { return filepath.Join(b.dir, name) }

func readBoot(dir string) (boot, error) {
	var b boot
	raw, err := os.ReadFile(filepath.Join(dir, "boot.json"))
	if err != nil {
		return b, err
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return b, fmt.Errorf("%s: %w", dir, err)
	}
	b.dir = dir
	for _, f := range []string{b.Kernel, b.Initrd, b.Disk} {
		if f == "" || strings.Contains(f, "/") {
			return b, fmt.Errorf("%s/boot.json: bad file name %q", dir, f)
		}
		if _, err := os.Stat(b.path(f)); err != nil {
			return b, err
		}
	}
	if b.Root == "" {
		b.Root = "/dev/vda"
	}
	return b, nil
}

// machine is the q35 microvm.Machine.
type machine struct {
	agent string // the guest agent binary handed in by fw_cfg
}

func (m *machine) Name() string     { return Name }
func (m *machine) MinMemory() int64 { return MinMemory }

func (m *machine) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Isolation:   driver.IsolationVM,
		Pause:       true,
		TTY:         true,
		Credentials: true,
		Screenshot:  true,
		Input:       true,
		LayerKinds:  []string{driver.LayerDir},
	}
}

// imageBoot finds the boot disk of spec's image: a single directory layer
// whose image directory has fullvm/boot.json. Anything else (an image with
// no kernel, a layered environment) cannot boot as a full VM.
func imageBoot(spec driver.Spec) (boot, error) {
	if len(spec.Layers) != 1 || spec.Layers[0].Kind != driver.LayerDir {
		return boot{}, errdefs.Invalid("fullvm: image %q is not a bootable disk image: fullvm boots images built by scripts/fullvm-image.sh (%q)", spec.Image, DefaultImage)
	}
	dir := filepath.Join(filepath.Dir(spec.Layers[0].Path), "fullvm")
	b, err := readBoot(dir)
	if err != nil {
		kernels, _ := filepath.Glob(filepath.Join(spec.Layers[0].Path, "boot", "vmlinuz*"))
		if len(kernels) == 0 {
			return boot{}, errdefs.Invalid("fullvm: image %q has no kernel (no /boot/vmlinuz*) and no boot disk: fullvm boots images built by scripts/fullvm-image.sh (%q)", spec.Image, DefaultImage)
		}
		return boot{}, errdefs.Invalid("fullvm: image %q has a kernel but no fullvm boot disk (%v): build one with scripts/fullvm-image.sh", spec.Image, err)
	}
	return b, nil
}

// TCGCacheMiB is the size of TCG's translation cache (QEMU's tb-size) of a
// full VM without KVM.
const TCGCacheMiB = 256

// MaxDisk is the largest disk_bytes a full VM takes: the guest grows its
// root file system online, which ext4 does up to 1024 times the size mkfs
// reserved room for.
const MaxDisk = 1 << 40

// Check implements microvm.Machine.
func (m *machine) Check(ctx context.Context, spec driver.Spec) error {
	if spec.Disk > MaxDisk {
		return errdefs.Invalid("fullvm: disk_bytes %d is above the fullvm maximum of %d (1 TiB)", spec.Disk, int64(MaxDisk))
	}
	_, err := imageBoot(spec)
	return err
}

// qcow2Size is the virtual size of the qcow2 image at p (its header).
func qcow2Size(p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var h [32]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0, fmt.Errorf("%s: qcow2 header: %w", p, err)
	}
	if string(h[:4]) != "QFI\xfb" {
		return 0, fmt.Errorf("%s: not a qcow2 image", p)
	}
	n := int64(binary.BigEndian.Uint64(h[24:]))
	if n <= 0 {
		return 0, fmt.Errorf("%s: qcow2 virtual size %d", p, n)
	}
	return n, nil
}

// Args implements microvm.Machine: a qcow2 overlay over the image's base
// disk, then q35 with the std VGA display, the PS/2 keyboard, a USB tablet,
// virtio disk, serial port and balloon.
func (m *machine) Args(ctx context.Context, spec driver.Spec, l microvm.Launch) ([]string, error) {
	b, err := imageBoot(spec)
	if err != nil {
		return nil, err
	}
	// The overlay is the base disk plus disk_bytes; the guest agent grows
	// the root file system over it at start (the base image's file system
	// is about as big as its files, so what is free is about disk_bytes).
	base, err := qcow2Size(b.path(b.Disk))
	if err != nil {
		return nil, errdefs.Internal(err, "fullvm: base disk")
	}
	size := (base + l.DiskBytes + 1<<20 - 1) &^ (1<<20 - 1)
	overlay := filepath.Join(l.Dir, "overlay.qcow2")
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2",
		"-F", "qcow2", "-b", b.path(b.Disk), overlay, fmt.Sprint(size)).CombinedOutput()
	if err != nil {
		return nil, errdefs.Internal(fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out))), "fullvm: overlay (qemu-img create)")
	}
	app := "root=" + b.Root + " rw console=ttyS0 quiet panic=-1 mitigations=off audit=0 systemd.show_status=false net.ifnames=0"
	if l.Hostname != "" {
		app += " systemd.hostname=" + l.Hostname
	}
	args := []string{"-M", "q35"}
	cpu := microvm.CPUArgs(l.Accel)
	if l.Accel == "tcg" && len(cpu) > 1 && cpu[0] == "-accel" {
		// A desktop runs much guest code (X, GTK programs): TCG's
		// translation cache would grow to its default 1 GiB and QEMU past
		// its cgroup's memory limit (OOM-killed); a quarter of that keeps
		// the desktop's hot code.
		cpu[1] = "tcg,tb-size=" + fmt.Sprint(TCGCacheMiB)
	}
	args = append(args, cpu...)
	args = append(args,
		"-smp", fmt.Sprint(l.VCPUs), "-m", fmt.Sprintf("%dM", l.MemMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", b.path(b.Kernel), "-initrd", b.path(b.Initrd), "-append", app,
		"-device", "VGA,vgamem_mb=16",
		"-device", "qemu-xhci", "-device", "usb-tablet",
		"-drive", "id=root,file="+overlay+",format=qcow2,if=none,cache=unsafe,discard=unmap",
		"-device", "virtio-blk-pci,drive=root",
		"-device", "virtio-serial-pci",
		"-device", "virtserialport,chardev=agent,name=dsec.agent",
		"-device", "virtio-balloon-pci,free-page-reporting=on",
		"-fw_cfg", "name=opt/dsec/vmagent,file="+m.agent,
	)
	return append(args, l.HostArgs()...), nil
}

var _ microvm.Machine = (*machine)(nil)
