package fullvm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/dsec-dev/dsec/internal/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/vm/microvm"
)

// boot is an image's fullvm/boot.json (scripts/fullvm-image.sh).
type boot struct {
	KernelRelease string `json:"kernel_release"`
	Kernel        string `json:"kernel"`
	Initrd        string `json:"initrd"`
	Disk          string `json:"disk"`
	Root          string `json:"root"`
	dir           string
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

// Check implements microvm.Machine.
func (m *machine) Check(ctx context.Context, spec driver.Spec) error {
	_, err := imageBoot(spec)
	return err
}

// Args implements microvm.Machine: a qcow2 overlay over the image's base
// disk, then q35 with the std VGA display, the PS/2 keyboard, a USB tablet,
// virtio disk, serial port and balloon.
func (m *machine) Args(ctx context.Context, spec driver.Spec, l microvm.Launch) ([]string, error) {
	b, err := imageBoot(spec)
	if err != nil {
		return nil, err
	}
	overlay := filepath.Join(l.Dir, "overlay.qcow2")
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2",
		"-F", "qcow2", "-b", b.path(b.Disk), overlay).CombinedOutput()
	if err != nil {
		return nil, errdefs.Internal(fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out))), "fullvm: overlay (qemu-img create)")
	}
	app := "root=" + b.Root + " rw console=ttyS0 quiet panic=-1 mitigations=off audit=0 systemd.show_status=false net.ifnames=0"
	if l.Hostname != "" {
		app += " systemd.hostname=" + l.Hostname
	}
	args := []string{"-M", "q35"}
	args = append(args, microvm.CPUArgs(l.Accel)...)
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
