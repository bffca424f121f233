package container

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/cgroups"
	"github.com/dsec-dev/dsec/internal/errdefs"
)

// Device is a device an operator adds to every sandbox: a node in /dev and a
// rule in the device cgroup allowlist.
type Device struct {
	Name string // file name in /dev
	Rule cgroups.DeviceRule
}

// ParseDevice parses NAME:TYPE:MAJOR:MINOR[:ACCESS] (e.g. "fuse:c:10:229" or
// "fuse:c:10:229:rw"); ACCESS defaults to rwm.
func ParseDevice(s string) (Device, error) {
	f := strings.Split(s, ":")
	if len(f) != 4 && len(f) != 5 {
		return Device{}, errdefs.Invalid("device %q: want NAME:TYPE:MAJOR:MINOR[:ACCESS], e.g. fuse:c:10:229", s)
	}
	access := "rwm"
	if len(f) == 5 {
		access = f[4]
	}
	if f[0] == "" || strings.ContainsAny(f[0], "/ \n") || f[0] == "." || f[0] == ".." {
		return Device{}, errdefs.Invalid("device %q: bad name", s)
	}
	if f[1] != "c" && f[1] != "b" {
		return Device{}, errdefs.Invalid("device %q: type must be c or b", s)
	}
	r, err := cgroups.ParseDeviceRule(fmt.Sprintf("%s %s:%s %s", f[1], f[2], f[3], access))
	if err != nil {
		return Device{}, err
	}
	if r.Major < 0 || r.Minor < 0 {
		return Device{}, errdefs.Invalid("device %q: a node needs numbers, not *", s)
	}
	return Device{Name: f[0], Rule: r}, nil
}

// DefaultDeviceRules is the device cgroup allowlist of every sandbox: the
// nodes of initproto.DefaultDevices, /dev/pts/ptmx and the sandbox's own
// pseudo-terminals (136:*, within its devpts instance).
func DefaultDeviceRules() []cgroups.DeviceRule {
	var rs []cgroups.DeviceRule
	for _, n := range initproto.DefaultDevices() {
		rs = append(rs, cgroups.DeviceRule{Type: n.Type, Major: int64(n.Major), Minor: int64(n.Minor), Access: "rwm"})
	}
	return append(rs,
		cgroups.DeviceRule{Type: 'c', Major: 5, Minor: 2, Access: "rwm"},    // ptmx
		cgroups.DeviceRule{Type: 'c', Major: 136, Minor: -1, Access: "rwm"}) // pts
}

// weakening turns single defences off. It exists for tests only: every
// escape probe must be shown to succeed against a sandbox lacking the
// defence it tests (internal/escapeprobe). It is unexported and set only by
// this package's tests (Driver.weaken); nothing in the API or the
// configuration reaches it.
type weakening struct {
	devCgroup bool // no device cgroup
	nodev     bool // root and /dev/shm allow device nodes
	mknod     bool // keep CAP_MKNOD
	masks     bool // no masked paths
	readOnly  bool // no read-only paths
	netRaw    bool // keep CAP_NET_RAW
	seccomp   bool // no seccomp filter
	caps      bool // every capability but the two above
	dumpable  bool // the init stays dumpable
	cgroupNS  bool // no cgroup namespace
	xino      bool // overlay without xino
	ping      bool // no net.ipv4.ping_group_range
	userns    bool // no user namespace (the test driver's default has one)
}

// security is the init policy for sandbox id.
func (d *Driver) security(id string) initproto.Security {
	s := initproto.DefaultSecurity()
	for _, dev := range d.cfg.Devices {
		s.Devices = append(s.Devices, initproto.DeviceNode{Name: dev.Name, Type: dev.Rule.Type,
			Major: uint32(dev.Rule.Major), Minor: uint32(dev.Rule.Minor)})
	}
	if d.weaken == nil {
		return s
	}
	w := d.weaken(id)
	if w.caps {
		s.Caps = allCaps()
		s.Caps &^= initproto.CapSet(capMknod, capNetRaw)
	}
	if w.mknod {
		s.Caps |= initproto.CapSet(capMknod)
	}
	if w.netRaw {
		s.Caps |= initproto.CapSet(capNetRaw)
	}
	if w.nodev {
		s.RootNoDev = false
	}
	if w.masks {
		s.Masked = nil
	}
	if w.readOnly {
		s.ReadOnly = nil
	}
	s.Dumpable = w.dumpable
	s.NoCgroupNS = w.cgroupNS
	s.NoXino = w.xino
	if w.ping {
		s.PingGroupRange = ""
	}
	return s
}

const (
	capMknod  = 27
	capNetRaw = 13
)

// allCaps is every capability this process holds (a sandbox can get no
// more).
func allCaps() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// devicePolicy is the device cgroup allowlist for sandbox id.
func (d *Driver) devicePolicy(id string) cgroups.DevicePolicy {
	if d.weaken != nil && d.weaken(id).devCgroup {
		return cgroups.DevicePolicy{}
	}
	p := cgroups.DevicePolicy{Restrict: true, Allow: DefaultDeviceRules()}
	for _, dev := range d.cfg.Devices {
		p.Allow = append(p.Allow, dev.Rule)
	}
	return p
}

// seccompFor is the seccomp program for sandbox id (nil: none).
func (d *Driver) seccompFor(id string) *os.File {
	if d.weaken != nil && d.weaken(id).seccomp {
		return nil
	}
	return d.seccomp
}
