package netpolicy

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// MaxDomains bounds the domain names of one policy (allow and deny each).
const MaxDomains = 64

// ParseDomain checks one domain rule, "host.name" or "*.name" (every name
// strictly below name), and returns it in canonical form (lower case, no
// trailing dot). field names the rule's place in the request for the error,
// e.g. "allow_domains[2]". An IP address is not a domain name: it belongs in
// the CIDR list.
func ParseDomain(field, s string) (string, error) {
	d := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	name, wild := strings.CutPrefix(d, "*.")
	switch {
	case d == "":
		return "", errdefs.Invalid("network.%s: empty domain name", field)
	case len(d) > 253:
		return "", errdefs.Invalid("network.%s %q: domain name longer than 253 characters", field, s)
	case looksLikeIP(d):
		return "", errdefs.Invalid("network.%s %q: an IP address or CIDR, not a domain name (give it as an allow entry)", field, s)
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return "", errdefs.Invalid("network.%s %q: want a fully qualified name such as pypi.org or *.example.com", field, s)
	}
	for _, l := range labels {
		if !validLabel(l) {
			if strings.Contains(l, "*") {
				return "", errdefs.Invalid("network.%s %q: a wildcard is only allowed as the whole first label (*.example.com)", field, s)
			}
			return "", errdefs.Invalid("network.%s %q: malformed label %q (letters, digits and inner hyphens, 1-63 characters)", field, s, l)
		}
	}
	if wild {
		return "*." + name, nil
	}
	return name, nil
}

func looksLikeIP(s string) bool {
	host, _, _ := strings.Cut(s, "/")
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return true
	}
	return strings.Trim(host, "0123456789.") == "" || strings.Contains(s, ":")
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// parseDomains checks a list of domain rules (field "allow_domains" or
// "deny_domains") and returns them canonical, without duplicates.
func parseDomains(field string, list []string) ([]string, error) {
	if len(list) > MaxDomains {
		return nil, errdefs.Invalid("network.%s: %d names (at most %d)", field, len(list), MaxDomains)
	}
	var out []string
	seen := map[string]bool{}
	for i, s := range list {
		d, err := ParseDomain(field+"["+strconv.Itoa(i)+"]", s)
		if err != nil {
			return nil, err
		}
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out, nil
}

// domainMatch says whether name (canonical: lower case, no trailing dot)
// matches one of the rules.
func domainMatch(rules []string, name string) bool {
	for _, r := range rules {
		if suffix, ok := strings.CutPrefix(r, "*."); ok {
			if strings.HasSuffix(name, "."+suffix) {
				return true
			}
		} else if name == r {
			return true
		}
	}
	return false
}
