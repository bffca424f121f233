package microvm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
)

// TestGuestBoot checks what the agent's fast paths must keep: a process the
// host starts runs in the sandbox cgroup (the one FREEZE freezes; it is
// cloned straight into it), before and after a pause; virtio_balloon, which
// the agent loads only after the first exec, does get loaded (free page
// reporting needs it); Config.Trace yields the guest's timeline of the boot
// and of each traced exec.
func TestGuestBoot(t *testing.T) {
	needVM(t)
	d, err := New(Config{StateDir: stateDir, Trace: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("guestboot"), Layers: imageLayers(t, "busybox"),
		CPU: 1, Memory: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	cgroup := func(when string) {
		t.Helper()
		r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: []string{"/bin/cat", "/proc/self/cgroup"}, Cwd: "/"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(r.Stdout); got != "0::/sandbox" {
			t.Errorf("%s: /proc/self/cgroup = %q (stderr %q), want 0::/sandbox", when, got, r.Stderr)
		}
	}
	cgroup("first exec")
	cgroup("second exec")
	p := inst.(driver.Pauser)
	if err := p.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	cgroup("after resume")

	if h := inst.(*instance).HostTrace(); !strings.Contains(h, "qemu_started=") || !strings.Contains(h, "hello=") {
		t.Errorf("HostTrace() = %q", h)
	}
	tr := inst.(*instance).Trace()
	if len(tr) != 2 {
		t.Fatalf("Trace() = %d lines, want 2 (Config.Trace = 2): %q", len(tr), tr)
	}
	for _, step := range []string{"init=", "virtio_blk=", "ready=", "hello=", "exec=", "spawned=", "exited="} {
		if !strings.Contains(tr[0], step) {
			t.Errorf("boot trace has no %s: %q", step, tr[0])
		}
	}
	if !strings.HasPrefix(tr[1], "exec=") || !strings.Contains(tr[1], "exited=") {
		t.Errorf("second exec's trace = %q", tr[1])
	}

	// The balloon driver is loaded once the agent has served the first exec
	// and seen an idle moment (or 2 s later at most).
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: []string{"/bin/cat", "/proc/modules"}, Cwd: "/"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(r.Stdout, "virtio_balloon ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("virtio_balloon not loaded 30 s after boot: %s", r.Stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestBootTimeoutSaysWhereTheGuestIs: a guest that does not come up is
// described by QEMU's run state and its vCPUs' instruction pointers, so a
// hung boot can be placed. Here QEMU starts with its CPUs stopped (-S).
func TestBootTimeoutSaysWhereTheGuestIs(t *testing.T) {
	needVM(t)
	d, err := New(Config{StateDir: stateDir, NoSnapshots: true, ExtraArgs: []string{"-S"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("hung"), Layers: imageLayers(t, "busybox"), CPU: 1, Memory: 256 << 20})
	if err == nil {
		inst.Destroy(context.Background())
		t.Fatal("a guest whose CPUs never run came up")
	}
	msg := err.Error()
	if !strings.Contains(msg, "guest did not come up") || !strings.Contains(msg, "QEMU prelaunch") || !strings.Contains(msg, "vCPU0 EIP=0000fff0 HLT=0") {
		t.Fatalf("boot error %q: want QEMU's run state (prelaunch) and the vCPU at the reset vector", msg)
	}
}

// TestVCPUPlaces reads each vCPU's place out of "info registers -a": RIP in
// long mode, EIP before it, and the halt flag.
func TestVCPUPlaces(t *testing.T) {
	regs := "\r\nCPU#0\r\nRAX=0 RBX=0\r\nRIP=ffffffff81b2c3d4 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\r\n" +
		"ES =0000\r\nCPU#1\r\nEAX=0\r\nEIP=0000fff0 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\r\n"
	if got, want := vcpuPlaces(regs), "vCPU0 RIP=ffffffff81b2c3d4 HLT=1, vCPU1 EIP=0000fff0 HLT=0"; got != want {
		t.Fatalf("vcpuPlaces = %q, want %q", got, want)
	}
	if got := vcpuPlaces("no such command"); got != "" {
		t.Fatalf("vcpuPlaces of no registers = %q", got)
	}
}
