package cgroups

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
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

// sharedDevices returns the v1 devices cgroup that groups beside name
// (same parent) with policy p join, creating it and writing p once: the
// devices controller only filters, so one cgroup serves every sandbox with
// the same policy, and a create costs one cgroup.procs write instead of a
// directory and a write per rule. It is <parent>/devices-<hash of p>.
func (h *Hierarchy) sharedDevices(name string, p DevicePolicy) (string, error) {
	m, ok := h.mounts[ctrlDevices]
	if !ok {
		return "", errdefs.Wrap(api.CodeNotImplemented, errors.ErrUnsupported, "no v1 devices hierarchy")
	}
	if slices.Contains(h.dirs, m) {
		return "", errdefs.Wrap(api.CodeNotImplemented, errors.ErrUnsupported, "the devices controller is co-mounted with another")
	}
	rules := p.rules()
	sum := sha256.Sum256([]byte(strings.Join(rules, "\n")))
	dir := filepath.Join(h.base(m), filepath.Dir(name), "devices-"+hex.EncodeToString(sum[:4]))
	if _, ok := h.devShared.Load(dir); ok {
		return dir, nil
	}
	h.devMu.Lock()
	defer h.devMu.Unlock()
	if _, ok := h.devShared.Load(dir); ok {
		return dir, nil
	}
	// an existing one (a previous agent's) is kept if it has the policy,
	// so running sandboxes never see it reset
	if b, err := os.ReadFile(filepath.Join(dir, "devices.list")); err != nil || strings.TrimSpace(string(b)) != strings.Join(rules, "\n") {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("devices cgroup: %w", err)
		}
		cs := []control{{path: filepath.Join(dir, "devices.deny"), value: "a"}}
		for _, r := range rules {
			cs = append(cs, control{path: filepath.Join(dir, "devices.allow"), value: r})
		}
		if err := applyControls(cs); err != nil {
			return "", fmt.Errorf("devices cgroup: %w", err)
		}
	}
	h.devShared.Store(dir, true)
	return dir, nil
}

// rules is the policy in devices.list form and order.
func (p DevicePolicy) rules() []string {
	var rs []string
	for _, r := range p.Allow {
		rs = append(rs, r.String())
	}
	return rs
}

// DeleteDevices removes the shared v1 devices cgroups under parent (relative
// to the Hierarchy's parent, "" for it) and then parent itself there (and
// the Hierarchy's parent when parent is ""), once no process uses them; call
// it when the last group under parent is gone. A no-op on v2.
func (h *Hierarchy) DeleteDevices(parent string) error {
	m, ok := h.mounts[ctrlDevices]
	if h.version == 2 || !ok || slices.Contains(h.dirs, m) {
		return nil
	}
	dir := filepath.Join(h.base(m), parent)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "devices-") {
			d := filepath.Join(dir, e.Name())
			if err := h.rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, &os.PathError{Op: "rmdir", Path: d, Err: err})
			}
			h.devShared.Delete(d)
		}
	}
	if len(errs) == 0 && dir != m {
		if err := h.rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, &os.PathError{Op: "rmdir", Path: dir, Err: err})
		}
	}
	return errors.Join(errs...)
}
