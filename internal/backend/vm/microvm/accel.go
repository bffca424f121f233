package microvm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// ProbeTimeout bounds the KVM boot probe. A working KVM boots the probe in
// well under a second; TCG needs ~4 s for the same, so 20 s only ever
// expires on a KVM that hangs its guests.
const ProbeTimeout = 20 * time.Second

// AccelInfo is the acceleration the driver chose and why.
type AccelInfo = api.VMAccel

// Accel returns the acceleration VMs use, probing KVM once per host boot
// (the result is cached in Config.AccelCache with the boot ID).
func (d *Driver) Accel(ctx context.Context) AccelInfo {
	d.accelMu.Lock()
	defer d.accelMu.Unlock()
	if d.accel != nil {
		return *d.accel
	}
	a := d.chooseAccel(ctx)
	d.accel = &a
	d.log.Debug("microvm acceleration", "accel", a.Accel, "reason", a.Reason)
	return a
}

// VMInfo reports the acceleration for `dsec info`; while the probe runs
// (the first start on a host boot) accel is empty and the reason says so.
func (d *Driver) VMInfo(ctx context.Context) *api.VMInfo {
	if !d.accelMu.TryLock() {
		return &api.VMInfo{Reason: "KVM boot probe running", Kernel: d.kernel, FreePageReporting: !d.cfg.NoFreePageReporting}
	}
	d.accelMu.Unlock()
	a := d.Accel(ctx)
	return &api.VMInfo{Accel: a.Accel, Reason: a.Reason, Kernel: d.kernel, FreePageReporting: !d.cfg.NoFreePageReporting}
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

func (d *Driver) chooseAccel(ctx context.Context) AccelInfo {
	switch d.cfg.Accel {
	case "kvm", "tcg":
		return AccelInfo{Accel: d.cfg.Accel, Reason: "configured"}
	case "":
	default:
		return AccelInfo{Accel: "tcg", Reason: fmt.Sprintf("unknown accel %q configured; using tcg", d.cfg.Accel)}
	}
	if d.confined() {
		if _, ok := kvmGroup(); !ok {
			if _, err := os.Stat("/dev/kvm"); err == nil {
				return AccelInfo{Accel: "tcg", Reason: "/dev/kvm is not group-accessible (QEMU runs as an unprivileged user; make it root:kvm 0660); using TCG"}
			}
		}
	}
	cache := d.cfg.AccelCache
	var cached struct {
		BootID string `json:"boot_id"`
		AccelInfo
	}
	if b, err := os.ReadFile(cache); err == nil && json.Unmarshal(b, &cached) == nil && cached.BootID == bootID() && cached.Accel != "" {
		return cached.AccelInfo
	}
	a := d.probe(ctx)
	d.log.Info("microvm: KVM boot probe", "accel", a.Accel, "reason", a.Reason)
	cached.BootID, cached.AccelInfo = bootID(), a
	if b, err := json.Marshal(cached); err == nil {
		_ = os.MkdirAll(filepath.Dir(cache), 0o755)
		_ = os.WriteFile(cache, b, 0o600)
	}
	return a
}

// probe boots the kernel with accel=kvm into the agent's probe mode (it
// prints DSEC-probe-OK and powers off) and takes KVM only if that line
// arrives within ProbeTimeout.
func (d *Driver) probe(ctx context.Context) AccelInfo {
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		return AccelInfo{Accel: "tcg", Reason: "no usable /dev/kvm: " + err.Error()}
	} else {
		f.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	t0 := time.Now()
	ok, out, err := d.bootFloor(ctx, "kvm", "probe", 256)
	if ok {
		return AccelInfo{Accel: "kvm", Reason: fmt.Sprintf("KVM boot probe reached the guest's init in %v", time.Since(t0).Round(time.Millisecond))}
	}
	tail := out
	if len(tail) > 200 {
		tail = tail[len(tail)-200:]
	}
	why := fmt.Sprintf("KVM boot probe did not reach the guest's init within %v", ProbeTimeout)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		why = fmt.Sprintf("KVM boot probe failed: %v", err)
	}
	if t := strings.TrimSpace(tail); t != "" {
		why += " (last output: " + strconv.Quote(t) + ")"
	}
	return AccelInfo{Accel: "tcg", Reason: why + "; using TCG"}
}

// bootFloor boots a VM whose init prints "DSEC-<mode>-OK" and powers off,
// with the same machine, kernel and initramfs as a sandbox (the benchmark
// floor and the probe). It reports whether the marker was printed.
func (d *Driver) bootFloor(ctx context.Context, accel, mode string, memMiB int64) (bool, string, error) {
	args := d.baseArgs(accel, 1, memMiB)
	args = append(args, "-append", d.cmdline(accel)+" dsec.mode="+mode, "-serial", "stdio")
	// A probe stuck in a hanging KVM must not outlive this process.
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Confined as a sandbox's QEMU (so the probe finds what they can
	// open), as the group's own uid, which no VM has.
	args, dirf, err := d.confineCmd(args, d.gid(), attr)
	if err != nil {
		return false, "", err
	}
	cmd := exec.CommandContext(ctx, d.cfg.QEMU, args...)
	cmd.SysProcAttr = attr
	if dirf != nil {
		defer dirf.Close()
		cmd.ExtraFiles = []*os.File{dirf}
	}
	var out bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		return false, "", err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := d.startConfined(cmd, accel); err != nil {
		pr.Close()
		pw.Close()
		return false, "", err
	}
	pw.Close()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		ok := false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "DSEC-"+mode+"-OK") {
				ok = true
			}
		}
		found <- ok
	}()
	err = cmd.Wait()
	pr.Close()
	ok := <-found
	if ctx.Err() != nil {
		return ok, out.String(), ctx.Err()
	}
	return ok, out.String(), err
}

// BootFloor is the benchmark floor: the same QEMU command line (machine,
// CPU model, one vCPU, memMiB of memory, kernel, initramfs and kernel
// command line) booting to an init that prints and powers off; it returns
// the wall time.
func (d *Driver) BootFloor(ctx context.Context, memMiB int64) (time.Duration, error) {
	t, _, err := d.BootFloorOutput(ctx, memMiB)
	return t, err
}

// BootFloorOutput is BootFloor that also returns the guest's console
// output (with Config.Trace, the marker line has the guest's uptime at init).
func (d *Driver) BootFloorOutput(ctx context.Context, memMiB int64) (time.Duration, string, error) {
	a := d.Accel(ctx)
	t0 := time.Now()
	ok, out, err := d.bootFloor(ctx, a.Accel, "floor", memMiB)
	if !ok {
		return 0, out, fmt.Errorf("microvm: floor boot did not print its marker: %v: %s", err, out)
	}
	return time.Since(t0), out, nil
}

// hostTSCKHz is the host's TSC frequency: under TCG the guest's TSC runs at
// the host's rate, and telling the guest (tsc_early_khz) spares it a
// calibration that fails without a PIT.
func hostTSCKHz() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}
