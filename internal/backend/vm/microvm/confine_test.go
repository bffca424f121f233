package microvm

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
)

// qemuStatus is what a host administrator reads of a running QEMU: its
// /proc/PID/status fields and which of its namespaces differ from ours.
type qemuStatus struct {
	uids, gids, capEff, capPrm, seccomp, noNewPrivs string
	ownNS                                           []string
	cmdline                                         string
}

func readQEMUStatus(t *testing.T, pid int) qemuStatus {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var s qemuStatus
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.Join(strings.Fields(v), " ")
		switch k {
		case "Uid":
			s.uids = v
		case "Gid":
			s.gids = v
		case "CapEff":
			s.capEff = v
		case "CapPrm":
			s.capPrm = v
		case "Seccomp":
			s.seccomp = v
		case "NoNewPrivs":
			s.noNewPrivs = v
		}
	}
	for _, ns := range []string{"mnt", "pid_for_children", "ipc", "net", "uts"} {
		theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		ours, err2 := os.Readlink("/proc/self/ns/" + ns)
		if err1 == nil && err2 == nil && theirs != ours {
			s.ownNS = append(s.ownNS, ns)
		}
	}
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil {
		if ours, _ := os.Readlink("/proc/self/ns/pid"); ns != ours {
			s.ownNS = append(s.ownNS, "pid")
		}
	}
	c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	s.cmdline = strings.ReplaceAll(string(c), "\x00", " ")
	return s
}

func startBusybox(t *testing.T, cfg Config, name string) (*instance, func()) {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID(name), Layers: imageLayers(t, "busybox"),
		CPU: 1, Memory: 256 << 20})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return inst.(*instance), func() { inst.Destroy(context.Background()); cancel() }
}

// TestQEMUConfined checks, from the host, what a guest escape would get: the
// running QEMU has a non-root uid of its own (not another VM's), no
// capabilities, QEMU's seccomp filter (mode 2) and its own mount, PID, IPC,
// UTS and network namespaces; and that the same check reports the
// unconfined QEMU (Config.Unconfined) as such, so it can fail.
func TestQEMUConfined(t *testing.T) {
	needVM(t)
	a, stopA := startBusybox(t, Config{StateDir: stateDir}, "confined-a")
	defer stopA()
	b, stopB := startBusybox(t, Config{StateDir: stateDir}, "confined-b")
	defer stopB()
	sa, sb := readQEMUStatus(t, a.st.PID), readQEMUStatus(t, b.st.PID)
	for _, s := range []qemuStatus{sa, sb} {
		if strings.HasPrefix(s.uids, "0 ") || strings.Contains(" "+s.uids+" ", " 0 ") {
			t.Errorf("QEMU runs with uid %q: want no root uid", s.uids)
		}
		if strings.Contains(" "+s.gids+" ", " 0 ") {
			t.Errorf("QEMU runs with gid %q: want no root gid", s.gids)
		}
		if s.capEff != "0000000000000000" || s.capPrm != "0000000000000000" {
			t.Errorf("QEMU capabilities: CapEff %s CapPrm %s, want none", s.capEff, s.capPrm)
		}
		if s.seccomp != "2" || s.noNewPrivs != "1" {
			t.Errorf("QEMU Seccomp %q NoNewPrivs %q, want 2 (filter) and 1", s.seccomp, s.noNewPrivs)
		}
		if got := strings.Join(s.ownNS, ","); got != "mnt,pid_for_children,ipc,net,uts,pid" {
			t.Errorf("QEMU's own namespaces = %q, want mnt,pid_for_children,ipc,net,uts,pid", got)
		}
		if !strings.Contains(s.cmdline, "-sandbox "+SandboxArg) {
			t.Errorf("QEMU command line has no -sandbox %s: %s", SandboxArg, s.cmdline)
		}
	}
	if sa.uids == sb.uids {
		t.Errorf("two VMs share uid %q", sa.uids)
	}
	// The state directory's other VMs are out of reach of a VM's uid.
	fi, err := os.Stat(a.st.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("VM directory mode %v, want 0700 (its own uid's)", fi.Mode().Perm())
	}

	// The same check against the weakened VM.
	w, stopW := startBusybox(t, Config{StateDir: stateDir, Unconfined: true}, "unconfined")
	defer stopW()
	sw := readQEMUStatus(t, w.st.PID)
	if !strings.HasPrefix(sw.uids, "0 ") || sw.capEff == "0000000000000000" || sw.seccomp == "2" || len(sw.ownNS) != 0 {
		t.Errorf("the unconfined QEMU passes for confined: %+v", sw)
	}
}
