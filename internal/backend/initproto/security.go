package initproto

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Security is the policy a sandbox init applies during setup. It is data on
// the Go side and plain config lines for the init (see configText), so every
// default lives here, once, and a test can weaken one defence at a time.
type Security struct {
	// Caps is the capability set kept for sandbox root (bit n is
	// capability n): bounding, permitted and effective. The inheritable
	// and ambient sets stay empty.
	Caps uint64
	// Devices are the nodes created in /dev (besides the symlinks fd,
	// stdin, stdout, stderr and ptmx -> pts/ptmx). Only a device cgroup
	// decides whether they open; see the container driver.
	Devices []DeviceNode
	// Masked paths get an empty read-only directory or /dev/null bound
	// over them; ReadOnly paths a read-only bind of themselves. Missing
	// paths are skipped.
	Masked, ReadOnly []string
	// PingGroupRange is written to net.ipv4.ping_group_range in the
	// sandbox's network namespace ("" leaves the kernel's "1 0").
	PingGroupRange string
	// RootNoDev mounts the overlay root nodev: device nodes open only
	// in /dev.
	RootNoDev bool
	// AllowSetuid leaves no_new_privs unset, so setuid and file-capability
	// programs (sudo, su) work: a process can rise to sandbox root and no
	// further, since the capability bounding set (Caps) is inherited and
	// cannot grow and the seccomp filter cannot be removed. The init then
	// loads the filter before it drops CAP_SYS_ADMIN (without no_new_privs
	// the kernel requires it).
	AllowSetuid bool

	// Dumpable, NoCgroupNS and NoXino exist for tests that weaken a sandbox on
	// purpose to show that an escape probe can succeed; the node never
	// sets them. Dumpable leaves the init ptrace-able by sandbox root
	// (so its fds, e.g. the control socket, can be taken); NoCgroupNS
	// keeps the host's cgroup namespace.
	// NoXino mounts the overlay without xino=on, so readdir and stat
	// disagree on directory inode numbers across layers.
	Dumpable   bool
	NoCgroupNS bool
	NoXino     bool
}

// DeviceNode is a device node in a sandbox's /dev.
type DeviceNode struct {
	Name         string // file name in /dev
	Type         byte   // 'c' or 'b'
	Major, Minor uint32
}

// CapSet returns the set with the listed capabilities.
func CapSet(caps ...int) uint64 {
	var s uint64
	for _, c := range caps {
		s |= 1 << uint(c)
	}
	return s
}

// DefaultCaps is the OCI default capability set without CAP_NET_RAW (ping
// works through net.ipv4.ping_group_range instead) and without CAP_MKNOD
// (the nodes a sandbox may use are in /dev already, and the device cgroup
// would refuse mknod of any other): CHOWN DAC_OVERRIDE FOWNER FSETID KILL
// SETGID SETUID SETPCAP NET_BIND_SERVICE SYS_CHROOT AUDIT_WRITE SETFCAP.
func DefaultCaps() uint64 {
	return CapSet(unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID,
		unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP,
		unix.CAP_NET_BIND_SERVICE, unix.CAP_SYS_CHROOT, unix.CAP_AUDIT_WRITE, unix.CAP_SETFCAP)
}

// DefaultDevices are the nodes of every sandbox's /dev.
func DefaultDevices() []DeviceNode {
	return []DeviceNode{
		{"null", 'c', 1, 3}, {"zero", 'c', 1, 5}, {"full", 'c', 1, 7},
		{"random", 'c', 1, 8}, {"urandom", 'c', 1, 9}, {"tty", 'c', 5, 0},
	}
}

// DefaultMasked are runc's and Docker's masked paths plus the host-global
// files found by walking /proc and /sys as root inside a sandbox that a
// sandbox has no business reading: physical page state (kpage*, reading
// kpagecgroup crashed a host kernel in DSec's fleet), kernel memory and
// symbol maps, slab and allocator state, and debug and tracing trees.
func DefaultMasked() []string {
	return []string{
		// runc / Docker
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
		"/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap",
		// physical pages and kernel memory
		"/proc/kpagecgroup", "/proc/kpageflags", "/proc/kpagecount",
		"/proc/kallsyms", "/proc/vmallocinfo", "/proc/slabinfo", "/proc/pagetypeinfo",
		"/proc/iomem", "/proc/ioports", "/proc/modules", "/proc/mtrr", "/proc/kmsg",
		"/proc/lock_stat", "/proc/config.gz", "/proc/vmcore",
		"/proc/buddyinfo", "/proc/zoneinfo", "/proc/key-users",
		// this platform's per-program CPU accounting (other tenants' commands)
		"/proc/program_cpu",
		"/sys/kernel/boot_params", "/sys/kernel/mm/damon",
		"/sys/kernel/mm/page_idle", "/sys/kernel/slab", "/sys/kernel/debug",
		"/sys/kernel/tracing", "/sys/kernel/security", "/sys/kernel/vmcoreinfo",
	}
}

// DefaultReadOnly are runc's and Docker's read-only paths.
func DefaultReadOnly() []string {
	return []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
}

// DefaultSecurity is the policy of every sandbox.
func DefaultSecurity() Security {
	return Security{
		Caps:           DefaultCaps(),
		Devices:        DefaultDevices(),
		Masked:         DefaultMasked(),
		ReadOnly:       DefaultReadOnly(),
		PingGroupRange: "0 2147483647",
		RootNoDev:      true,
	}
}

func (s *Security) validate() error {
	for _, d := range s.Devices {
		if d.Name == "" || len(d.Name) > 63 || strings.ContainsAny(d.Name, "/ \n\x00") ||
			d.Name == "." || d.Name == ".." || (d.Type != 'c' && d.Type != 'b') {
			return fmt.Errorf("initproto: bad device node %+v", d)
		}
	}
	for _, p := range append(append([]string{}, s.Masked...), s.ReadOnly...) {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, "\n\x00") {
			return fmt.Errorf("initproto: bad masked or read-only path %q", p)
		}
	}
	if strings.ContainsAny(s.PingGroupRange, "\n\x00") {
		return fmt.Errorf("initproto: bad ping group range %q", s.PingGroupRange)
	}
	return nil
}

// configText renders the policy as init config lines.
func (s *Security) configText(b *strings.Builder) {
	fmt.Fprintf(b, "caps=%x\n", s.Caps)
	for _, d := range s.Devices {
		fmt.Fprintf(b, "dev=%s %c %d %d\n", d.Name, d.Type, d.Major, d.Minor)
	}
	for _, p := range s.Masked {
		fmt.Fprintf(b, "mask=%s\n", p)
	}
	for _, p := range s.ReadOnly {
		fmt.Fprintf(b, "ro=%s\n", p)
	}
	if s.PingGroupRange != "" {
		fmt.Fprintf(b, "pingrange=%s\n", s.PingGroupRange)
	}
	if s.RootNoDev {
		b.WriteString("rootnodev=1\n")
	}
	if s.AllowSetuid {
		b.WriteString("setuid=1\n")
	}
	if s.Dumpable {
		b.WriteString("dumpable=1\n")
	}
	if s.NoCgroupNS {
		b.WriteString("cgroupns=0\n")
	}
	if s.NoXino {
		b.WriteString("xino=0\n")
	}
}
