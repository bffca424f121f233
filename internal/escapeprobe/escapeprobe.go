// Package escapeprobe is an escape-probe suite: the things a hostile (or
// merely careless) agent tries from inside a sandbox as root, each written
// as an attempt that reports whether it got through. The probes run inside
// a sandbox (cmd/dsec-escape-probe, a static binary a test copies in) and
// print one Result each.
//
// Every probe names the defences that stop it (Probe.Defences). A test
// shows that each probe fails against a default sandbox, succeeds against a
// sandbox with all of its defences turned off, and, where it has several,
// fails again with any one of them turned back on; so no probe can pass
// vacuously. The container driver's tests do that with a test-only knob;
// the e2e tests run the same probes against a real server.
package escapeprobe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Defence names one isolation mechanism a probe runs into.
type Defence string

// The defences of a container sandbox.
const (
	DevCgroup Defence = "device-cgroup"   // device allowlist in the kernel
	NoDev     Defence = "nodev"           // nodev on the root and /dev/shm
	NoMknod   Defence = "no-cap-mknod"    // CAP_MKNOD dropped
	Masks     Defence = "masked-paths"    // /proc and /sys files masked
	ReadOnly  Defence = "read-only-paths" // /proc/sys etc. read-only
	NoNetRaw  Defence = "no-cap-net-raw"  // CAP_NET_RAW dropped
	Seccomp   Defence = "seccomp"         // the syscall filter
	Caps      Defence = "capabilities"    // the reduced capability set
	Dumpable  Defence = "non-dumpable-init"
	CgroupNS  Defence = "cgroup-namespace"
	UserNS    Defence = "user-namespace" // sandbox root is an unprivileged host uid
)

// Env is what the probes need to know about the host, passed in by the test
// (the sandbox cannot see it).
type Env struct {
	HostDisk [2]uint32 // major, minor of the host's root block device
	WantCaps uint64    // the capability set sandbox root must have
	// MaskedPaths are masked /proc and /sys paths that exist on the host;
	// read-masked gives one result per path, named read-masked:PATH.
	MaskedPaths []string
	path        string // the path a perPath probe is run for
}

// Probe is one escape attempt.
type Probe struct {
	Name     string
	Doc      string
	Defences []Defence
	// Also are defences that stop the probe in some cases only (e.g. a
	// user namespace hides some masked files but not others): they are
	// turned off too when the probe is shown to get through, but need not
	// stop it alone.
	Also []Defence
	// try returns nil when the escape worked and a reason when it did not;
	// detail describes what it saw either way.
	try func(env Env) (detail string, err error)
	// perPath: try runs once per Env.MaskedPaths entry (Env.path set).
	perPath bool
}

// Without is p on a sandbox that lacks defence d by design (e.g. no user
// namespace, the node's default): d is dropped from Defences and Also; ok
// is false when nothing else stops p, so it gets through there by design.
func (p Probe) Without(d Defence) (Probe, bool) {
	drop := func(ds []Defence) []Defence {
		var out []Defence
		for _, x := range ds {
			if x != d {
				out = append(out, x)
			}
		}
		return out
	}
	p.Defences, p.Also = drop(p.Defences), drop(p.Also)
	return p, len(p.Defences) > 0
}

// Result is one probe's outcome.
type Result struct {
	Name    string `json:"name"`
	Escaped bool   `json:"escaped"`
	Detail  string `json:"detail"`
}

// Probes is the suite, in a fixed order.
func Probes() []Probe {
	ps := []Probe{
		{Name: "mknod-dev-hostdisk", Doc: "mknod the host's root disk in /dev and read it",
			Defences: []Defence{NoMknod, DevCgroup, UserNS}, try: func(e Env) (string, error) { return mknodRead("/dev", e) }},
		{Name: "mknod-tmp-hostdisk", Doc: "mknod the host's root disk on the overlay root and read it",
			Defences: []Defence{NoMknod, DevCgroup, NoDev, UserNS}, try: func(e Env) (string, error) { return mknodRead("/tmp", e) }},
		{Name: "mknod-shm-hostdisk", Doc: "mknod the host's root disk in /dev/shm and read it",
			Defences: []Defence{NoMknod, DevCgroup, NoDev, UserNS}, try: func(e Env) (string, error) { return mknodRead("/dev/shm", e) }},
		{Name: "read-masked", Doc: "read a host-global /proc or /sys file or list a directory (e.g. /proc/kpagecgroup)",
			Defences: []Defence{Masks}, Also: []Defence{UserNS}, try: readMasked, perPath: true},
		{Name: "write-proc-sys", Doc: "write a sysctl (kernel.hostname, harmless: its own value)",
			Defences: []Defence{ReadOnly, UserNS}, try: writeProcSys},
		{Name: "host-root-uid", Doc: "sandbox root is host root (uid 0 maps to host uid 0 in /proc/self/uid_map)",
			Defences: []Defence{UserNS}, try: hostRootUID},
		{Name: "write-host-sysctl", Doc: "write a host-global sysctl (vm.overcommit_ratio, harmless: its own value)",
			Defences: []Defence{ReadOnly, UserNS}, try: writeHostSysctl},
		{Name: "raw-packet-socket", Doc: "open an AF_PACKET raw socket",
			Defences: []Defence{NoNetRaw}, try: rawPacket},
		{Name: "raw-inet-socket", Doc: "open an AF_INET SOCK_RAW ICMP socket",
			Defences: []Defence{NoNetRaw}, try: rawInet},
		{Name: "capability-set", Doc: "sandbox root holds capabilities beyond the expected set",
			Defences: []Defence{Caps}, try: capSet},
		{Name: "seccomp-off", Doc: "the process runs without a seccomp filter or no_new_privs",
			Defences: []Defence{Seccomp}, try: seccompOff},
		{Name: "setns", Doc: "setns on a real namespace fd (its own UTS namespace)",
			Defences: []Defence{Seccomp, Caps}, try: setnsProbe},
		{Name: "mount-tmpfs", Doc: "mount a tmpfs",
			Defences: []Defence{Seccomp, Caps}, try: mountProbe},
		{Name: "unshare-userns", Doc: "create a user namespace (full capabilities inside it)",
			Defences: []Defence{Seccomp}, try: unshareUser},
		{Name: "steal-init-fd", Doc: "take the init's fds (its control socket) with pidfd_getfd, to speak the control protocol",
			Defences: []Defence{Dumpable, Seccomp}, try: stealInitFD},
		{Name: "unlisted-syscall", Doc: "make a system call the seccomp allow list does not name (get_mempolicy, harmless)",
			Defences: []Defence{Seccomp}, try: unlistedSyscall},
		{Name: "cgroup-escape", Doc: "mount a cgroup hierarchy and move itself out of the sandbox's cgroup",
			Defences: []Defence{Seccomp, Caps, CgroupNS, UserNS}, try: cgroupEscape},
	}
	return ps
}

// Run runs the named probes (all when names is empty).
func Run(env Env, names []string) []Result {
	var out []Result
	for _, p := range Probes() {
		if len(names) > 0 && !contains(names, p.Name) {
			continue
		}
		if !p.perPath {
			out = append(out, run(p.Name, p.try, env))
			continue
		}
		for _, path := range env.MaskedPaths {
			e := env
			e.path = path
			out = append(out, run(p.Name+":"+path, p.try, e))
		}
	}
	return out
}

func run(name string, try func(Env) (string, error), env Env) Result {
	detail, err := try(env)
	r := Result{Name: name, Escaped: err == nil, Detail: detail}
	if err != nil {
		r.Detail = strings.TrimSpace(detail + ": " + err.Error())
	}
	return r
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// HostRootDisk finds the block device holding the host's root file system
// from /proc/self/mountinfo (run on the host): the device of the "/" mount
// if it is a block device, else the first mount whose source is a block
// device under /dev.
func HostRootDisk() (major, minor uint32, path string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, 0, "", err
	}
	defer f.Close()
	major, minor, src, err := rootDisk(f)
	if err != nil {
		return 0, 0, "", err
	}
	p := fmt.Sprintf("/dev/block/%d:%d", major, minor)
	if _, err := os.Stat(p); err != nil {
		p = src
	}
	return major, minor, p, nil
}

// rootDisk picks the root disk from mountinfo text (see HostRootDisk).
func rootDisk(r io.Reader) (major, minor uint32, src string, err error) {
	type cand struct {
		maj, min uint32
		src      string
	}
	var root *cand
	var others []cand
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		majs, mins, ok := strings.Cut(fields[2], ":")
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(majs, 10, 32)
		mi, err2 := strconv.ParseUint(mins, 10, 32)
		if err1 != nil || err2 != nil || ma == 0 {
			continue // 0:N is an anonymous device (tmpfs, overlay, ...)
		}
		c := cand{uint32(ma), uint32(mi), fields[sep+2]}
		if fields[4] == "/" {
			root = &c
		} else if strings.HasPrefix(c.src, "/dev/") {
			others = append(others, c)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, "", err
	}
	if root == nil && len(others) == 0 {
		return 0, 0, "", errors.New("no block-device mount in /proc/self/mountinfo")
	}
	if root == nil {
		sort.Slice(others, func(i, j int) bool { return others[i].src < others[j].src })
		root = &others[0]
	}
	return root.maj, root.min, root.src, nil
}
