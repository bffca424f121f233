// Package hostfeat probes the host features dsec uses (cgroup version and
// controllers, EROFS file-backed mounts, FUSE request resend, idmapped mounts,
// user namespaces, nftables, KSM, swap/zram, KVM) and says, for each one that is
// missing, what is degraded without it. `dsec doctor`, GET /v1/info and the
// tests that need a feature (Need) all read the same probe.
package hostfeat

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Names of the features (api.HostFeature.Name; the skip messages of Need and
// .ci/skips.allow use them too).
const (
	CgroupV2       = "cgroup-v2" // a unified hierarchy with memory, cpu and pids
	CgroupV1       = "cgroup-v1" // v1 hierarchies for memory, cpu, pids and freezer
	CgroupDevices  = "cgroup-v1-devices"
	ErofsFile      = "erofs-file-backed"
	FuseResend     = "fuse-resend"
	Idmap          = "idmapped-mounts"
	TmpfsUserXattr = "tmpfs-user-xattrs"
	UserNS         = "user-namespaces"
	Nftables       = "nftables"
	KSM            = "ksm"
	Swap           = "swap"
	KVM            = "kvm"
)

// Host is where Probe looks: the root of /proc, /sys and /dev ("/" on a real
// host; tests point it at a fake tree) and the kernel release (uname -r).
type Host struct {
	Root    string
	Release string
}

// Local is this host.
func Local() Host {
	var u unix.Utsname
	rel := ""
	if unix.Uname(&u) == nil {
		rel = unix.ByteSliceToString(u.Release[:])
	}
	return Host{Root: "/", Release: rel}
}

func (h Host) path(p string) string { return filepath.Join(h.Root, p) }

// Kernel is the release's major and minor version (0, 0 when unparsable).
func (h Host) Kernel() (major, minor int) {
	parts := strings.SplitN(h.Release, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	major, _ = strconv.Atoi(parts[0])
	end := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(parts[1])
	}
	minor, _ = strconv.Atoi(parts[1][:end])
	return major, minor
}

func (h Host) atLeast(major, minor int) bool {
	ma, mi := h.Kernel()
	return ma > major || (ma == major && mi >= minor)
}

// Probe reports every feature, in a fixed order.
func (h Host) Probe() []api.HostFeature {
	v2, v1 := h.cgroups()
	return []api.HostFeature{v2, v1, h.cgroupDevices(), h.erofsFile(), h.fuseResend(),
		h.idmap(), h.tmpfsUserXattr(), h.userns(), h.nftables(), h.ksm(), h.swap(), h.kvm()}
}

// Feature is one feature of Probe by name.
func (h Host) Feature(name string) (api.HostFeature, error) {
	for _, f := range h.Probe() {
		if f.Name == name {
			return f, nil
		}
	}
	return api.HostFeature{}, fmt.Errorf("hostfeat: unknown feature %q", name)
}

// Skipper is the part of testing.TB that Need uses.
type Skipper interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Need skips the test unless this host has every named feature; the message
// starts with "host feature NAME missing", the form .ci/skips.allow names.
func Need(t Skipper, names ...string) {
	t.Helper()
	if len(names) == 0 {
		return
	}
	h := Local()
	for _, n := range names {
		f, err := h.Feature(n)
		if err != nil {
			t.Fatalf("%v", err)
			return
		}
		if !f.Available {
			t.Skipf("host feature %s missing: %s", n, f.Detail)
			return
		}
	}
}

func (h Host) cgroups() (v2, v1 api.HostFeature) {
	v2 = api.HostFeature{Name: CgroupV2, Required: true,
		Degraded: "containers and FnCall need cgroup v2 (memory, cpu, pids) or cgroup v1; without either they cannot start"}
	v1 = api.HostFeature{Name: CgroupV1,
		Degraded: "none while cgroup v2 is there; otherwise containers and FnCall cannot start"}
	root := h.path("/sys/fs/cgroup")
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		ctrls := strings.Fields(string(b))
		v2.Controllers = ctrls
		missing := missingOf(ctrls, "memory", "cpu", "pids")
		v2.Available = len(missing) == 0
		v2.Detail = "unified hierarchy at /sys/fs/cgroup, controllers: " + strings.Join(ctrls, " ")
		if !v2.Available {
			v2.Detail += "; missing " + strings.Join(missing, " ")
		}
	} else {
		v2.Detail = "no unified hierarchy at /sys/fs/cgroup"
	}
	// v1 hierarchies: /proc/cgroups lists the controllers the kernel has;
	// a v1 one is usable when it is mounted under /sys/fs/cgroup/NAME.
	var mounted []string
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids", "freezer", "devices"} {
		if h.v1Mounted(c) {
			mounted = append(mounted, c)
		}
	}
	v1.Controllers = mounted
	missing := missingOf(mounted, "memory", "cpu", "pids", "freezer")
	v1.Available = len(missing) == 0
	if len(mounted) == 0 {
		v1.Detail = "no cgroup v1 hierarchy mounted"
	} else {
		v1.Detail = "v1 hierarchies: " + strings.Join(mounted, " ")
		if !v1.Available {
			v1.Detail += "; missing " + strings.Join(missing, " ")
		}
	}
	if v1.Available && !v2.Available {
		v2.Degraded = "none while cgroup v1 is there (dsec uses v1)"
		v2.Required = false
	}
	return v2, v1
}

// v1Mounted reports whether a v1 hierarchy with controller c is mounted under
// /sys/fs/cgroup (as c or a comma-joined name such as cpu,cpuacct).
func (h Host) v1Mounted(c string) bool {
	root := h.path("/sys/fs/cgroup")
	ents, err := os.ReadDir(root)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if slices.Contains(strings.Split(e.Name(), ","), c) {
			if _, err := os.Stat(filepath.Join(root, e.Name(), "cgroup.procs")); err == nil {
				return true
			}
		}
	}
	return false
}

func (h Host) cgroupDevices() api.HostFeature {
	f := api.HostFeature{Name: CgroupDevices, Available: h.v1Mounted("devices"),
		Degraded: "none on cgroup v2 (device rules are eBPF programs); on v1 a sandbox's device rules cannot be set"}
	if f.Available {
		f.Detail = "v1 devices hierarchy mounted"
	} else {
		f.Detail = "no v1 devices hierarchy"
	}
	return f
}

func missingOf(have []string, want ...string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// filesystem reports whether /proc/filesystems lists fs or the kernel has it
// as a module (loaded on first mount).
func (h Host) filesystem(fs string) bool {
	if f, err := os.Open(h.path("/proc/filesystems")); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 0 && fields[len(fields)-1] == fs {
				return true
			}
		}
	}
	mods, err := os.ReadFile(h.path(filepath.Join("/lib/modules", h.Release, "modules.dep")))
	return err == nil && strings.Contains(string(mods), "/"+fs+".ko")
}

func (h Host) erofsFile() api.HostFeature {
	f := api.HostFeature{Name: ErofsFile,
		Degraded: "layered environments mount each layer through a loop device (one per layer, a node-wide resource) instead of reading the file directly"}
	switch {
	case !h.filesystem("erofs"):
		f.Detail = "no erofs file system in the kernel"
		f.Degraded = "layered environments cannot be mounted lazily; directory images still work"
	case !h.atLeast(6, 12):
		f.Detail = fmt.Sprintf("kernel %s: erofs file-backed mounts need Linux 6.12", h.Release)
	default:
		f.Available = true
		f.Detail = "erofs mounts a regular file (Linux 6.12+)"
	}
	return f
}

func (h Host) fuseResend() api.HostFeature {
	f := api.HostFeature{Name: FuseResend,
		Degraded: "a restarted layerd cannot have the kernel resend the reads its predecessor took: sandboxes reading lazily fetched layers at that moment see EIO instead of waiting"}
	switch {
	case !h.filesystem("fuse") && !exists(h.path("/dev/fuse")):
		f.Detail = "no FUSE in the kernel"
		f.Degraded = "layered environments cannot be fetched lazily (layerd needs FUSE)"
	case !h.atLeast(6, 9):
		f.Detail = fmt.Sprintf("kernel %s: FUSE_NOTIFY_RESEND needs Linux 6.9", h.Release)
	default:
		f.Available = true
		f.Detail = "FUSE_NOTIFY_RESEND (Linux 6.9+)"
	}
	return f
}

func (h Host) idmap() api.HostFeature {
	f := api.HostFeature{Name: Idmap,
		Degraded: "user-namespaced sandboxes (--userns) cannot map the image's files to the sandbox's users and are refused"}
	// mount_setattr(MOUNT_ATTR_IDMAP) is Linux 5.12; overlayfs lower layers
	// on ext4/xfs/btrfs idmapped from 5.19, tmpfs 6.3.
	switch {
	case h.atLeast(6, 3):
		f.Available = true
		f.Detail = fmt.Sprintf("kernel %s (idmapped lower layers need 5.19, on tmpfs 6.3)", h.Release)
	case h.atLeast(5, 19):
		f.Available = true
		f.Detail = fmt.Sprintf("kernel %s: lower layers on tmpfs cannot be idmapped (Linux 6.3); on ext4, xfs, btrfs they can", h.Release)
	default:
		f.Detail = fmt.Sprintf("kernel %s: idmapped overlay lower layers need Linux 5.19", h.Release)
	}
	return f
}

func (h Host) tmpfsUserXattr() api.HostFeature {
	f := api.HostFeature{Name: TmpfsUserXattr,
		Degraded: "in user-namespaced sandboxes (--userns) removing or replacing a directory that comes from the image fails with EIO (the writable layer is a tmpfs, and overlayfs in a user namespace keeps its whiteouts in user.* extended attributes)"}
	if h.atLeast(6, 6) {
		f.Available = true
		f.Detail = "user.* extended attributes on tmpfs (Linux 6.6+)"
	} else {
		f.Detail = fmt.Sprintf("kernel %s: user.* extended attributes on tmpfs need Linux 6.6", h.Release)
	}
	return f
}

func (h Host) userns() api.HostFeature {
	f := api.HostFeature{Name: UserNS,
		Degraded: "user-namespaced sandboxes (--userns) are refused; sandboxes run with the host's root mapped"}
	b, err := os.ReadFile(h.path("/proc/sys/user/max_user_namespaces"))
	if err != nil {
		f.Detail = "no /proc/sys/user/max_user_namespaces (kernel without CONFIG_USER_NS)"
		return f
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	f.Available = n > 0
	f.Detail = fmt.Sprintf("user.max_user_namespaces=%d", n)
	return f
}

func (h Host) nftables() api.HostFeature {
	f := api.HostFeature{Name: Nftables,
		Degraded: "egress policies (--allow-net) are refused: sandboxes get no network or none at all"}
	if h.Root != "/" {
		// A fake tree: the module files say it.
		f.Available = h.loaded("nf_tables") || h.builtin("nf_tables") ||
			exists(h.path(filepath.Join("/lib/modules", h.Release, "kernel/net/netfilter/nf_tables.ko")))
		f.Detail = "nf_tables module files"
		return f
	}
	// Asking the kernel loads nf_tables when it is a module.
	c, err := nftables.New()
	if err == nil {
		_, err = c.ListTables()
	}
	switch {
	case err == nil:
		f.Available = true
		f.Detail = "nf_tables answers"
	case errors.Is(err, unix.EPERM):
		f.Detail = "cannot ask nf_tables without CAP_NET_ADMIN (run as root)"
	default:
		f.Detail = fmt.Sprintf("nf_tables: %v", err)
	}
	return f
}

func (h Host) loaded(mod string) bool { return exists(h.path("/sys/module/" + mod)) }

func (h Host) builtin(mod string) bool {
	b, err := os.ReadFile(h.path(filepath.Join("/lib/modules", h.Release, "modules.builtin")))
	return err == nil && strings.Contains(string(b), "/"+mod+".ko")
}

func (h Host) module(rel string) bool {
	return exists(h.path(filepath.Join("/lib/modules", h.Release, rel)))
}

func (h Host) ksm() api.HostFeature {
	f := api.HostFeature{Name: KSM,
		Degraded: "--ksm has nothing to merge with: identical pages of sandboxes are not shared"}
	if exists(h.path("/sys/kernel/mm/ksm/run")) {
		f.Available = true
		f.Detail = "/sys/kernel/mm/ksm"
	} else {
		f.Detail = "kernel without KSM"
	}
	return f
}

func (h Host) swap() api.HostFeature {
	f := api.HostFeature{Name: Swap,
		Degraded: "memory QoS cannot push idle sandboxes' pages out (no swap tier); --swap zram:SIZE creates one when zram is there"}
	b, err := os.ReadFile(h.path("/proc/swaps"))
	var devs []string
	if err == nil {
		for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if i > 0 && l != "" {
				devs = append(devs, strings.Fields(l)[0])
			}
		}
	}
	zram := h.module("kernel/drivers/block/zram/zram.ko") || exists(h.path("/sys/class/zram-control"))
	switch {
	case len(devs) > 0:
		f.Available = true
		f.Detail = "swap on " + strings.Join(devs, " ")
	case zram:
		f.Detail = "no swap; zram available (--swap zram:SIZE)"
	default:
		f.Detail = "no swap and no zram"
	}
	return f
}

func (h Host) kvm() api.HostFeature {
	f := api.HostFeature{Name: KVM,
		Degraded: "microVMs and full VMs run under TCG emulation: several times slower to boot and run"}
	fd, err := unix.Open(h.path("/dev/kvm"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		unix.Close(fd)
		f.Available = true
		f.Detail = "/dev/kvm opens (the microVM backend still checks with a boot probe: see vm)"
	case errors.Is(err, unix.ENOENT):
		f.Detail = "no /dev/kvm"
	default:
		f.Detail = fmt.Sprintf("/dev/kvm: %v", err)
	}
	return f
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
