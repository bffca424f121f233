package microvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/cgroups"
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
// capabilities, QEMU's seccomp filter (mode 2), its own mount, PID, IPC,
// UTS and network namespaces, a /dev of only the device nodes it needs and
// a cgroup of its own with memory and pids limits; and that the same checks
// report the unconfined QEMU (Config.Unconfined) as such, so they can fail.
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
	for _, in := range []*instance{a, b} {
		for _, p := range jailProblems(t, in.st.PID, in.st.Dir, in.st.Accel, 256) {
			t.Error(p)
		}
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
	weak := strings.Join(jailProblems(t, w.st.PID, w.st.Dir, w.st.Accel, 256), "\n")
	if !strings.Contains(weak, "QEMU's /dev holds") || !strings.Contains(weak, "QEMU's memory cgroup is") ||
		!strings.Contains(weak, "QEMU's pids cgroup is") {
		t.Errorf("the unconfined QEMU's /dev and cgroup pass for confined: %q", weak)
	}
}

// qemuCred is the uid, gid and supplementary groups a running QEMU has.
func qemuCred(t *testing.T, pid int) *syscall.Credential {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	c := &syscall.Credential{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		num := func(s string) uint32 {
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				t.Fatalf("%s: %q", k, v)
			}
			return uint32(n)
		}
		switch k {
		case "Uid":
			c.Uid = num(f[0])
		case "Gid":
			c.Gid = num(f[0])
		case "Groups":
			for _, g := range f {
				c.Groups = append(c.Groups, num(g))
			}
		}
	}
	return c
}

// readsVMDir reports whether a process with cred lists dir and reads the
// first byte of its disk.
func readsVMDir(cred *syscall.Credential, dir string) (bool, string) {
	cmd := exec.Command("/bin/sh", "-c", `ls "$1" >/dev/null && head -c 1 "$1/disk.raw" >/dev/null`, "sh", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	return err == nil, strings.TrimSpace(string(out))
}

// TestVMUIDsPerDriver starts two drivers on two state directories in one
// process (two dsec nodes on one host): their VMs run under distinct uids
// and groups, and the second one's QEMU credentials cannot list or read the
// first VM's directory. The same check against two drivers forced onto one
// uid base (what every driver used before uid ranges were claimed) finds
// the directory readable, so it can fail.
func TestVMUIDsPerDriver(t *testing.T) {
	needVM(t)
	start := func(name string) (*instance, func()) {
		dir, err := os.MkdirTemp("", "dsec-microvm-node-")
		if err != nil {
			t.Fatal(err)
		}
		inst, stop := startBusybox(t, Config{StateDir: dir, NoSnapshots: true}, name)
		return inst, func() { stop(); os.RemoveAll(dir) }
	}
	a, stopA := start("node-a")
	defer stopA()
	b, stopB := start("node-b")
	defer stopB()
	ca, cb := qemuCred(t, a.st.PID), qemuCred(t, b.st.PID)
	t.Logf("node A's VM: uid %d gid %d; node B's VM: uid %d gid %d", ca.Uid, ca.Gid, cb.Uid, cb.Gid)
	if ca.Uid == cb.Uid || ca.Gid == cb.Gid {
		t.Errorf("two nodes' VMs share a uid or group: A %d:%d, B %d:%d", ca.Uid, ca.Gid, cb.Uid, cb.Gid)
	}
	if ok, out := readsVMDir(cb, a.st.Dir); ok {
		t.Errorf("node B's VM credentials read node A's VM directory %s", a.st.Dir)
	} else if !strings.Contains(out, "Permission denied") {
		t.Errorf("node B's VM credentials on node A's VM directory: %q, want Permission denied", out)
	}
	if ok, out := readsVMDir(ca, a.st.Dir); !ok {
		t.Errorf("node A's VM credentials cannot read their own directory: %s", out)
	}

	// Weakened: both drivers on the one default base, as before ranges.
	var creds []*syscall.Credential
	var dirs []string
	for i := range 2 {
		sd, err := os.MkdirTemp("", "dsec-microvm-weak-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(sd)
		d, err := New(Config{StateDir: sd, UIDBase: DefaultUIDBase})
		if err != nil {
			t.Fatal(err)
		}
		dir := d.vmDir(fmt.Sprintf("weak-%d", i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "disk.raw"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		uid, err := d.allocUID(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := giveFiles(dir, uid, d.gid(), true); err != nil {
			t.Fatal(err)
		}
		creds, dirs = append(creds, &syscall.Credential{Uid: uid, Gid: d.gid()}), append(dirs, dir)
	}
	if ok, out := readsVMDir(creds[1], dirs[0]); !ok {
		t.Errorf("weakened (one uid base for both drivers): the second VM's uid %d cannot read the first's directory (%s): the check cannot fail", creds[1].Uid, out)
	}
}

// jailProblems is what a host administrator finds wrong with the /dev and
// the cgroup of QEMU pid (of the sandbox whose VM directory is dir, guest
// memory memMiB): /dev (as QEMU's mount namespace has it) must hold exactly
// the null, zero, full, random and urandom nodes (and kvm under KVM), each
// the host's device; QEMU must be alone in a cgroup of its own,
// dsec-vm-<group>/vms-<id>, with a memory limit above the guest's memory
// and a pids limit.
func jailProblems(t *testing.T, pid int, dir, accel string, memMiB int64) []string {
	t.Helper()
	var bad []string
	want := []string{"full", "null", "random", "urandom", "zero"}
	if accel == "kvm" {
		want = []string{"full", "kvm", "null", "random", "urandom", "zero"}
	}
	root := fmt.Sprintf("/proc/%d/root/dev", pid)
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		bad = append(bad, fmt.Sprintf("QEMU's /dev holds %d entries %.200q, want %q", len(names), names, want))
	} else {
		for _, n := range names {
			var theirs, host syscall.Stat_t
			if syscall.Stat(root+"/"+n, &theirs) != nil || syscall.Stat("/dev/"+n, &host) != nil ||
				theirs.Rdev != host.Rdev || theirs.Mode != host.Mode {
				bad = append(bad, fmt.Sprintf("QEMU's /dev/%s is not the host's device node", n))
			}
		}
	}

	v2 := false
	if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(c), "memory") {
		v2 = true
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	suffix := "/vms-" + filepath.Base(dir)
	paths := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if v2 && f[0] == "0" {
				c = "unified"
			}
			paths[c] = f[2]
		}
	}
	files := map[string]string{}
	if v2 {
		p := paths["unified"]
		files["memory"], files["pids"] = "/sys/fs/cgroup"+p+"/memory.max", "/sys/fs/cgroup"+p+"/pids.max"
		paths = map[string]string{"memory": p, "pids": p}
	} else {
		files["memory"] = "/sys/fs/cgroup/memory" + paths["memory"] + "/memory.limit_in_bytes"
		files["pids"] = "/sys/fs/cgroup/pids" + paths["pids"] + "/pids.max"
	}
	for _, c := range []string{"memory", "pids"} {
		p := paths[c]
		if !strings.HasSuffix(p, suffix) || !strings.Contains(p, "/dsec-vm-") {
			bad = append(bad, fmt.Sprintf("QEMU's %s cgroup is %q, want .../dsec-vm-N%s", c, p, suffix))
			continue
		}
		procs, _ := os.ReadFile(filepath.Join(filepath.Dir(files[c]), "cgroup.procs"))
		if got := strings.TrimSpace(string(procs)); got != strconv.Itoa(pid) {
			bad = append(bad, fmt.Sprintf("QEMU's %s cgroup holds processes %q, want QEMU's alone", c, got))
		}
		b, err := os.ReadFile(files[c])
		n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		switch {
		case err != nil || perr != nil:
			bad = append(bad, fmt.Sprintf("QEMU's %s limit %q (%v): not a number", c, b, err))
		case c == "memory" && (n < memMiB<<20 || n > (memMiB<<20)+(4<<30)):
			bad = append(bad, fmt.Sprintf("QEMU's memory limit %d, want above the guest's %d MiB and within 4 GiB of it", n, memMiB))
		case c == "pids" && n > 4096:
			bad = append(bad, fmt.Sprintf("QEMU's pids limit %d, want at most 4096", n))
		}
	}
	return bad
}

// TestStaleVMCgroupsRemoved: a new driver removes the VM cgroups under its
// parent that no process is in and whose VM directory is gone (a snapshot's
// VM killed with the process that took it), and keeps one whose directory
// exists (a VM being started) and one with a process in it.
func TestStaleVMCgroupsRemoved(t *testing.T) {
	needVM(t)
	d, err := New(Config{StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	if d.cg == nil {
		t.Fatal("the driver has no cgroups for its VMs")
	}
	live := d.vmDir(drivertest.NewID("starting"))
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	busy := exec.Command("/bin/sleep", "60")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	var made []*cgroups.Group
	defer func() {
		busy.Process.Kill()
		busy.Wait()
		for _, g := range made {
			g.Delete(context.Background())
		}
	}()
	groups := map[string]bool{"snapshots-vm-gone": false, vmCgroupName(live): true, "vms-running-elsewhere": true}
	for name := range groups {
		g, err := d.cg.Create(name, cgroups.Limits{PidsMax: 8})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, g)
		if name == "vms-running-elsewhere" {
			if err := g.AddProc(busy.Process.Pid); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := New(Config{StateDir: stateDir}); err != nil {
		t.Fatal(err)
	}
	for name, keep := range groups {
		_, err := d.cg.Open(name)
		if kept := err == nil; kept != keep {
			t.Errorf("cgroup %s: kept %v, want %v (%v)", name, kept, keep, err)
		}
	}
}
