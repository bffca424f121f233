package hostfeat

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// fakeHost lays out files under a temporary root.
func fakeHost(t *testing.T, release string, files map[string]string) Host {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Host{Root: root, Release: release}
}

func byName(t *testing.T, h Host) map[string]api.HostFeature {
	t.Helper()
	m := map[string]api.HostFeature{}
	for _, f := range h.Probe() {
		m[f.Name] = f
	}
	return m
}

// A Debian bookworm host: cgroup v2 only, kernel 6.1, no swap, erofs and fuse
// as modules.
func TestBookwormHost(t *testing.T) {
	rel := "6.1.0-57-amd64"
	h := fakeHost(t, rel, map[string]string{
		"sys/fs/cgroup/cgroup.controllers":                          "cpuset cpu io memory hugetlb pids rdma misc\n",
		"sys/fs/cgroup/cgroup.procs":                                "",
		"proc/filesystems":                                          "nodev\tcgroup\nnodev\tcgroup2\n\text4\n",
		"proc/swaps":                                                "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n",
		"proc/sys/user/max_user_namespaces":                         "63432\n",
		"lib/modules/" + rel + "/modules.dep":                       "kernel/fs/erofs/erofs.ko:\nkernel/fs/fuse/fuse.ko:\n",
		"lib/modules/" + rel + "/kernel/net/netfilter/nf_tables.ko": "",
		"lib/modules/" + rel + "/kernel/drivers/block/zram/zram.ko": "",
	})
	m := byName(t, h)
	want := map[string]bool{CgroupV2: true, CgroupV1: false, CgroupDevices: false, ErofsFile: false,
		FuseResend: false, Idmap: true, TmpfsUserXattr: false, UserNS: true, Nftables: true, KSM: false, Swap: false, KVM: false}
	for name, avail := range want {
		f, ok := m[name]
		if !ok {
			t.Fatalf("no feature %s in %v", name, m)
		}
		if f.Available != avail {
			t.Errorf("%s: available=%v, want %v (%s)", name, f.Available, avail, f.Detail)
		}
		if !f.Available && f.Degraded == "" {
			t.Errorf("%s: missing but says nothing about what is degraded", name)
		}
	}
	if got := m[CgroupV2].Controllers; len(got) != 8 || got[2] != "io" {
		t.Errorf("cgroup-v2 controllers %v", got)
	}
	if !m[CgroupV2].Required {
		t.Errorf("cgroup-v2 is the only hierarchy: it must be required")
	}
	if d := m[FuseResend].Detail; d != "kernel 6.1.0-57-amd64: FUSE_NOTIFY_RESEND needs Linux 6.9" {
		t.Errorf("fuse-resend detail %q", d)
	}
}

// A hybrid host (this CI machine's layout): v1 controllers, an empty unified
// mount, swap on, kernel 6.18.
func TestHybridHost(t *testing.T) {
	files := map[string]string{
		"sys/fs/cgroup/unified/cgroup.controllers": "",
		"proc/filesystems":                         "nodev\terofs\nnodev\tfuse\n",
		"proc/swaps":                               "Filename Type Size Used Priority\n/dev/zram0 partition 1048572 0 100\n",
		"sys/kernel/mm/ksm/run":                    "0\n",
	}
	for _, c := range []string{"memory", "cpu,cpuacct", "pids", "freezer", "devices"} {
		files["sys/fs/cgroup/"+c+"/cgroup.procs"] = ""
	}
	m := byName(t, fakeHost(t, "6.18.4", files))
	for name, avail := range map[string]bool{CgroupV2: false, CgroupV1: true, CgroupDevices: true,
		ErofsFile: true, FuseResend: true, KSM: true, Swap: true, UserNS: false} {
		if m[name].Available != avail {
			t.Errorf("%s: available=%v, want %v (%s)", name, m[name].Available, avail, m[name].Detail)
		}
	}
	if m[CgroupV2].Required {
		t.Errorf("cgroup-v2 required although v1 is complete")
	}
	if m[Swap].Detail != "swap on /dev/zram0" {
		t.Errorf("swap detail %q", m[Swap].Detail)
	}
}

func TestKernel(t *testing.T) {
	for rel, want := range map[string][2]int{"6.1.0-57-amd64": {6, 1}, "6.18.44-fc-v1252": {6, 18}, "5.19": {5, 19}, "junk": {0, 0}} {
		ma, mi := Host{Release: rel}.Kernel()
		if ma != want[0] || mi != want[1] {
			t.Errorf("%s: %d.%d, want %d.%d", rel, ma, mi, want[0], want[1])
		}
	}
}

type recorder struct {
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = format }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = format }

func TestNeedUnknownFeatureFails(t *testing.T) {
	var r recorder
	Need(&r, "no-such-feature")
	if r.failed == "" || r.skipped != "" {
		t.Fatalf("an unknown feature must fail the test, not skip it: %+v", r)
	}
}
