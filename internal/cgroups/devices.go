package cgroups

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// ctrlDevices is the v1 devices controller (optional: only a group with a
// restricted DevicePolicy needs it).
const ctrlDevices = "devices"

// DevicePolicy is a group's device allowlist. The zero value leaves devices
// unrestricted; with Restrict set, every device access (open for read or
// write, mknod) is refused by the kernel unless a rule in Allow permits it:
// the v1 devices controller ("a" denied, then each rule allowed) or, on v2,
// a BPF_PROG_TYPE_CGROUP_DEVICE program attached to the group.
type DevicePolicy struct {
	Restrict bool
	Allow    []DeviceRule
}

// DeviceRule allows one kind of access to a set of devices.
type DeviceRule struct {
	Type   byte   // 'c' (character), 'b' (block) or 'a' (both)
	Major  int64  // -1: any
	Minor  int64  // -1: any
	Access string // a non-empty subset of "rwm" (read, write, mknod)
}

// String is the rule in the v1 devices.allow syntax, e.g. "c 136:* rwm".
func (r DeviceRule) String() string {
	num := func(n int64) string {
		if n < 0 {
			return "*"
		}
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("%c %s:%s %s", r.Type, num(r.Major), num(r.Minor), r.Access)
}

// ParseDeviceRule parses the v1 devices.allow syntax: "TYPE MAJOR:MINOR
// ACCESS" with TYPE c, b or a, MAJOR and MINOR numbers or '*', ACCESS a
// subset of rwm (e.g. "c 10:200 rwm"). "a" alone means every device.
func ParseDeviceRule(s string) (DeviceRule, error) {
	bad := func(why string) (DeviceRule, error) {
		return DeviceRule{}, errdefs.Invalid("device rule %q: %s (want e.g. \"c 10:200 rwm\")", s, why)
	}
	f := strings.Fields(s)
	if len(f) == 1 && f[0] == "a" {
		return DeviceRule{Type: 'a', Major: -1, Minor: -1, Access: "rwm"}, nil
	}
	if len(f) != 3 {
		return bad("want three fields")
	}
	if len(f[0]) != 1 || !strings.Contains("cba", f[0]) {
		return bad("type must be c, b or a")
	}
	r := DeviceRule{Type: f[0][0], Access: f[2]}
	maj, min, ok := strings.Cut(f[1], ":")
	if !ok {
		return bad("want MAJOR:MINOR")
	}
	for _, p := range []struct {
		s   string
		out *int64
	}{{maj, &r.Major}, {min, &r.Minor}} {
		if p.s == "*" {
			*p.out = -1
			continue
		}
		n, err := strconv.ParseUint(p.s, 10, 32)
		if err != nil {
			return bad("device numbers must be numbers or *")
		}
		*p.out = int64(n)
	}
	if err := r.validate(); err != nil {
		return bad(err.Error())
	}
	return r, nil
}

func (r DeviceRule) validate() error {
	if r.Type != 'c' && r.Type != 'b' && r.Type != 'a' {
		return fmt.Errorf("type %q must be c, b or a", r.Type)
	}
	if r.Major < -1 || r.Minor < -1 || r.Major > 1<<32-1 || r.Minor > 1<<32-1 {
		return fmt.Errorf("device number out of range")
	}
	seen := map[rune]bool{}
	for _, c := range r.Access {
		if !strings.ContainsRune("rwm", c) || seen[c] {
			return fmt.Errorf("access %q must be a subset of rwm", r.Access)
		}
		seen[c] = true
	}
	if r.Access == "" {
		return fmt.Errorf("empty access")
	}
	return nil
}

func (p DevicePolicy) validate() error {
	for _, r := range p.Allow {
		if err := r.validate(); err != nil {
			return errdefs.Invalid("device rule %s: %v", r, err)
		}
	}
	return nil
}

// deviceControlsV1 denies every device, then allows each rule.
func deviceControlsV1(p DevicePolicy, dir string) []control {
	if !p.Restrict {
		return nil
	}
	cs := []control{{path: filepath.Join(dir, "devices.deny"), value: "a"}}
	for _, r := range p.Allow {
		cs = append(cs, control{path: filepath.Join(dir, "devices.allow"), value: r.String()})
	}
	return cs
}
