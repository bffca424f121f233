package netpolicy

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Limits on what one policy may ask for, so a request cannot make a chain of
// unbounded length.
const (
	MaxAllow   = 64  // allow entries in one policy
	MaxRules   = 16  // rule set names in one policy
	MaxEntries = 256 // destinations after rule sets are expanded
)

// Entry is one allowed destination: an IPv4 prefix and, optionally, a TCP/UDP
// port range. PortLo == 0 means every port and every protocol.
type Entry struct {
	Prefix netip.Prefix
	PortLo uint16
	PortHi uint16
}

// String renders e in the syntax ParseEntry reads.
func (e Entry) String() string {
	s := e.Prefix.String()
	if e.Prefix.Bits() == 32 {
		s = e.Prefix.Addr().String()
	}
	switch {
	case e.PortLo == 0:
		return s
	case e.PortLo == e.PortHi:
		return fmt.Sprintf("%s:%d", s, e.PortLo)
	default:
		return fmt.Sprintf("%s:%d-%d", s, e.PortLo, e.PortHi)
	}
}

// reserved are destinations no policy may name: they are the sandbox's own
// (loopback), never routed (this network, multicast, broadcast), or the
// cloud-metadata and link-local range a sandbox must never reach.
var reserved = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "is \"this network\", never a destination"},
	{netip.MustParsePrefix("127.0.0.0/8"), "is loopback: a sandbox's loopback is its own and the node's is never reachable"},
	{netip.MustParsePrefix("169.254.0.0/16"), "is link-local (incl. cloud metadata), never reachable from a sandbox"},
	{netip.MustParsePrefix("224.0.0.0/3"), "is multicast or reserved, never a destination"},
}

// private are the ranges "internet" does not include: the node's and its
// neighbours' private networks (RFC 1918), carrier-grade NAT (RFC 6598,
// often a cloud's internal network). A broad entry (0.0.0.0/0, or any prefix
// holding one of these) does not reach them; an entry inside one of them
// (10.1.2.0/24, 192.168.0.5) names it explicitly and is honoured.
var private = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

// Private reports whether e lies inside a private range (RFC 1918, CGNAT):
// such an entry names that network explicitly.
func (e Entry) Private() bool {
	for _, p := range private {
		if p.Bits() <= e.Prefix.Bits() && p.Contains(e.Prefix.Addr()) {
			return true
		}
	}
	return false
}

// ParseEntry parses "CIDR[:PORT[-PORT]]": an IPv4 prefix in canonical form (no
// host bits set) or a bare IPv4 address (/32), optionally followed by a port
// or an inclusive port range in 1-65535.
func ParseEntry(s string) (Entry, error) {
	if s == "" {
		return Entry{}, errdefs.Invalid("network: empty allow entry")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return Entry{}, errdefs.Invalid("network: allow entry %q contains white space", s)
	}
	if strings.Count(s, ":") > 1 || strings.HasPrefix(s, "[") {
		return Entry{}, errdefs.Invalid("network: allow entry %q: only IPv4 destinations are supported (CIDR[:PORT[-PORT]])", s)
	}
	addr, ports, hasPort := strings.Cut(s, ":")
	var e Entry
	if strings.Contains(addr, "/") {
		p, err := netip.ParsePrefix(addr)
		if err != nil {
			return Entry{}, errdefs.Invalid("network: allow entry %q: malformed CIDR %q", s, addr)
		}
		if !p.Addr().Is4() {
			return Entry{}, errdefs.Invalid("network: allow entry %q: only IPv4 destinations are supported", s)
		}
		if m := p.Masked(); m != p {
			return Entry{}, errdefs.Invalid("network: allow entry %q: CIDR %q has host bits set (did you mean %s?)", s, addr, m)
		}
		e.Prefix = p
	} else {
		a, err := netip.ParseAddr(addr)
		if err != nil || a.Zone() != "" {
			return Entry{}, errdefs.Invalid("network: allow entry %q: malformed address %q (want CIDR[:PORT[-PORT]])", s, addr)
		}
		if !a.Is4() {
			return Entry{}, errdefs.Invalid("network: allow entry %q: only IPv4 destinations are supported", s)
		}
		e.Prefix = netip.PrefixFrom(a, 32)
	}
	for _, r := range reserved {
		if r.prefix.Bits() <= e.Prefix.Bits() && r.prefix.Contains(e.Prefix.Addr()) {
			return Entry{}, errdefs.Invalid("network: allow entry %q: %s %s", s, e.Prefix, r.why)
		}
	}
	if !hasPort {
		return e, nil
	}
	lo, hi, isRange := strings.Cut(ports, "-")
	var err error
	if e.PortLo, err = parsePort(s, lo); err != nil {
		return Entry{}, err
	}
	e.PortHi = e.PortLo
	if isRange {
		if e.PortHi, err = parsePort(s, hi); err != nil {
			return Entry{}, err
		}
		if e.PortHi < e.PortLo {
			return Entry{}, errdefs.Invalid("network: allow entry %q: port range %s is empty (low > high)", s, ports)
		}
	}
	return e, nil
}

func parsePort(entry, s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" || len(s) > 1 && s[0] == '0' {
		return 0, errdefs.Invalid("network: allow entry %q: malformed port %q (want 1-65535)", entry, s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, errdefs.Invalid("network: allow entry %q: port %d out of range 1-65535", entry, n)
	}
	return uint16(n), nil
}

var ruleName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// RuleSets are the operator's named destination lists ("pypi" → the mirror's
// addresses), which a policy refers to by name.
type RuleSets map[string][]Entry

// Add parses one "NAME=ENTRY[,ENTRY...]" definition (the value of a
// --network-rule flag) into rs. Defining a name twice is an error.
func (rs RuleSets) Add(def string) error {
	name, list, ok := strings.Cut(def, "=")
	if !ok || !ruleName.MatchString(name) {
		return errdefs.Invalid("network rule %q: want NAME=CIDR[:PORT[-PORT]][,...] with NAME of [a-z0-9._-]", def)
	}
	if _, dup := rs[name]; dup {
		return errdefs.Invalid("network rule %q is defined twice", name)
	}
	var entries []Entry
	for _, s := range strings.Split(list, ",") {
		e, err := ParseEntry(s)
		if err != nil {
			return fmt.Errorf("network rule %q: %w", name, err)
		}
		entries = append(entries, e)
	}
	if len(entries) > MaxEntries {
		return errdefs.Invalid("network rule %q has %d entries (at most %d)", name, len(entries), MaxEntries)
	}
	rs[name] = entries
	return nil
}

// Names lists the defined rule sets, sorted.
func (rs RuleSets) Names() []string {
	names := make([]string, 0, len(rs))
	for n := range rs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Resolve checks p and expands it into the destinations it allows, without
// duplicates and in a stable order. Every error is invalid_argument.
func (rs RuleSets) Resolve(p api.NetworkPolicy) ([]Entry, error) {
	if len(p.Allow) > MaxAllow {
		return nil, errdefs.Invalid("network: %d allow entries (at most %d)", len(p.Allow), MaxAllow)
	}
	if len(p.Rules) > MaxRules {
		return nil, errdefs.Invalid("network: %d rules (at most %d)", len(p.Rules), MaxRules)
	}
	var out []Entry
	seen := map[Entry]bool{}
	add := func(e Entry) {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	for _, s := range p.Allow {
		e, err := ParseEntry(s)
		if err != nil {
			return nil, err
		}
		add(e)
	}
	for _, name := range p.Rules {
		entries, ok := rs[name]
		if !ok {
			known := "none are defined"
			if len(rs) > 0 {
				known = "defined: " + strings.Join(rs.Names(), ", ")
			}
			return nil, errdefs.Invalid("network: unknown rule %q (%s)", name, known)
		}
		for _, e := range entries {
			add(e)
		}
	}
	if len(out) > MaxEntries {
		return nil, errdefs.Invalid("network: policy expands to %d destinations (at most %d)", len(out), MaxEntries)
	}
	if _, err := parseDomains("allow_domains", p.AllowDomains); err != nil {
		return nil, err
	}
	if _, err := parseDomains("deny_domains", p.DenyDomains); err != nil {
		return nil, err
	}
	return out, nil
}
