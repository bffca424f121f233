package api

import (
	"fmt"
	"strings"
)

// NetworkPolicy is a sandbox's egress policy: the body of PUT
// /v1/sandboxes/{id}/network and the "network" field of a create request.
// Without one a sandbox has loopback only. Allow entries are
// "CIDR[:PORT[-PORT]]" (IPv4; a bare address means /32; no port means every
// port and protocol, a port or range means TCP and UDP to those ports); Rules
// name rule sets the operator defined with `dsec server --network-rule`.
// AllowDomains are host names ("pypi.org") or wildcards ("*.pythonhosted.org",
// every name below it) whose addresses the sandbox may reach, learned by the
// node's DNS forwarder as the sandbox resolves them, for the record's TTL;
// DenyDomains are names the forwarder answers NXDOMAIN for (unless an allow
// name matches too).
// An empty policy on a sandbox that had egress keeps its link but allows
// nothing.
type NetworkPolicy struct {
	Allow        []string `json:"allow,omitempty"`
	Rules        []string `json:"rules,omitempty"`
	AllowDomains []string `json:"allow_domains,omitempty"`
	DenyDomains  []string `json:"deny_domains,omitempty"`
}

// Empty says whether p allows and denies nothing.
func (p NetworkPolicy) Empty() bool {
	return len(p.Allow) == 0 && len(p.Rules) == 0 && len(p.AllowDomains) == 0 && len(p.DenyDomains) == 0
}

// NetworkStatus is the "network" field of a sandbox with egress.
type NetworkStatus struct {
	Allow        []string `json:"allow,omitempty"`
	Rules        []string `json:"rules,omitempty"`
	AllowDomains []string `json:"allow_domains,omitempty"`
	DenyDomains  []string `json:"deny_domains,omitempty"`
	// Address is the sandbox's own IPv4 address on its link to the node.
	Address string `json:"address,omitempty"`
	// Denied counts the connection attempts (new flows) the policy refused,
	// including attempts to reach the node itself or another sandbox.
	Denied uint64 `json:"denied"`
}

// ParseNetworkPolicy reads a policy written as one string (`dsec image build
// --network`, the network query parameter of POST /v1/images:build): "none"
// or "" is no policy (nil: loopback only); otherwise comma-separated entries,
// each "rule:NAME" (Rules), "domain:NAME" (AllowDomains), "deny-domain:NAME"
// (DenyDomains) or "CIDR[:PORT[-PORT]]" (Allow).
func ParseNetworkPolicy(s string) (*NetworkPolicy, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil, nil
	}
	p := &NetworkPolicy{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		kind, v, ok := strings.Cut(e, ":")
		switch {
		case e == "":
			continue
		case ok && v == "" || strings.ContainsAny(kind, "abcdefghijklmnopqrstuvwxyz") && !ok:
			return nil, fmt.Errorf("network policy entry %q: want CIDR[:PORT[-PORT]], rule:NAME, domain:NAME or deny-domain:NAME", e)
		case ok && kind == "rule":
			p.Rules = append(p.Rules, v)
		case ok && kind == "domain":
			p.AllowDomains = append(p.AllowDomains, v)
		case ok && kind == "deny-domain":
			p.DenyDomains = append(p.DenyDomains, v)
		case strings.ContainsAny(kind, "abcdefghijklmnopqrstuvwxyz"):
			return nil, fmt.Errorf("network policy entry %q: want CIDR[:PORT[-PORT]], rule:NAME, domain:NAME or deny-domain:NAME", e)
		default:
			p.Allow = append(p.Allow, e)
		}
	}
	return p, nil
}

// String writes p in ParseNetworkPolicy's form ("none" for nil).
func (p *NetworkPolicy) String() string {
	if p == nil {
		return "none"
	}
	var out []string
	out = append(out, p.Allow...)
	for _, r := range p.Rules {
		out = append(out, "rule:"+r)
	}
	for _, d := range p.AllowDomains {
		out = append(out, "domain:"+d)
	}
	for _, d := range p.DenyDomains {
		out = append(out, "deny-domain:"+d)
	}
	return strings.Join(out, ",")
}
