// Package fullvm is the "fullvm" backend: every sandbox is a QEMU q35 guest
// booting a full Debian disk image (systemd, an X desktop on the emulated
// VGA display) from a per-sandbox qcow2 overlay over a base image that
// scripts/fullvm-image.sh builds once (the "desktop" image: image.json and
// rootfs/ like any directory image, plus fullvm/disk.qcow2, vmlinuz and
// initrd.img made from the same tree).
//
// The boot pipeline, the guest agent channel (virtio-serial, dsec-vmagent
// run by a systemd unit with --service, its binary handed in through
// fw_cfg so it always matches this daemon), QMP, pause/resume, delete and
// re-adoption are internal/backend/vm/microvm's: this package is a microvm.Machine
// (the command line, the overlay, the limits) plus the display
// capabilities, driver.Screenshotter (QMP screendump, PPM to PNG) and
// driver.Input (QMP input-send-event: keys on the PS/2 keyboard, clicks on
// a USB tablet with absolute coordinates).
package fullvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/vm/agentbin"
	"github.com/dsec-dev/dsec/internal/backend/vm/microvm"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Name is the backend name.
const Name = api.BackendFullVM

// Defaults and bounds.
const (
	// DefaultImagesDir is where the base image lives (DSEC_IMAGES_DIR).
	DefaultImagesDir = "/var/lib/dsec/images"
	// DefaultImage is the image scripts/fullvm-image.sh builds.
	DefaultImage = "desktop"
	// MinMemory is the smallest guest that boots systemd and X.
	MinMemory = 256 << 20
	// DefaultDesktopTimeout bounds the wait for a desktop image's desktop
	// after its guest agent answers (TCG on a loaded host draws it in tens
	// of seconds).
	DefaultDesktopTimeout = 3 * time.Minute
)

// Config configures the driver.
type Config struct {
	// StateDir holds one directory per VM (overlay, sockets, logs).
	StateDir string
	// VMDir, QEMU, Accel, AccelCache: as microvm.Config (the KVM probe and
	// its cache are shared with the microvm backend).
	VMDir, QEMU, Accel, AccelCache string
	// DesktopTimeout bounds the wait for the desktop of an image that
	// draws one (boot.json "desktop"); 0 is DefaultDesktopTimeout.
	DesktopTimeout time.Duration
	Logger         *slog.Logger
}

// Driver is the fullvm backend.
type Driver struct {
	*microvm.Driver
	m              *machine
	desktopTimeout time.Duration
	log            *slog.Logger
}

// New prepares the driver: the agent binary for fw_cfg, the microvm core.
func New(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("fullvm: StateDir is required")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("fullvm: %w", err)
	}
	agent, err := writeAgent(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	m := &machine{agent: agent}
	core, err := microvm.New(microvm.Config{StateDir: cfg.StateDir, VMDir: cfg.VMDir, QEMU: cfg.QEMU,
		Accel: cfg.Accel, AccelCache: cfg.AccelCache, Machine: m, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("fullvm: %w", err)
	}
	dt := cfg.DesktopTimeout
	if dt <= 0 {
		dt = DefaultDesktopTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Driver{Driver: core, m: m, desktopTimeout: dt, log: log}, nil
}

// Available reports whether the base image exists in imagesDir (the daemon
// registers the backend only then).
func Available(imagesDir string) error {
	if imagesDir == "" {
		imagesDir = DefaultImagesDir
	}
	_, err := readBoot(filepath.Join(imagesDir, DefaultImage, "fullvm"))
	return err
}

// writeAgent writes the embedded guest agent once per binary, named by its
// hash (QEMU reads it at start for fw_cfg; a running VM keeps its copy).
func writeAgent(dir string) (string, error) {
	b := agentbin.Binary()
	sum := sha256.Sum256(b)
	p := filepath.Join(dir, "vmagent-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return "", fmt.Errorf("fullvm: agent: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("fullvm: agent: %w", err)
	}
	return p, nil
}

// Start implements driver.Driver. For an image that draws a desktop
// (boot.json "desktop") it returns once a screenshot shows the desktop, so
// the first screenshot a client takes after create shows it; a desktop not
// drawn within the desktop timeout fails the start and the VM is destroyed.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (driver.Instance, error) {
	inst, err := d.Driver.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	in := wrap(inst)
	if b, err := imageBoot(spec); err == nil && b.Desktop != "" {
		if err := in.awaitDesktop(ctx, d.desktopTimeout); err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := in.Destroy(dctx); derr != nil {
				d.log.Warn("fullvm: destroy after the desktop wait failed", "id", spec.ID, "err", derr)
			}
			return nil, err
		}
	}
	return in, nil
}

// Recover implements driver.Driver.
func (d *Driver) Recover(ctx context.Context, spec driver.Spec, raw json.RawMessage) (driver.Instance, error) {
	inst, err := d.Driver.Recover(ctx, spec, raw)
	if err != nil {
		return nil, err
	}
	return wrap(inst), nil
}

var _ driver.Driver = (*Driver)(nil)
