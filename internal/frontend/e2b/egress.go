package e2b

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/pkg/api"
)

// allTraffic is E2B's "all traffic" selector and what internet access allows:
// every public IPv4 destination. The node's egress policy (internal/netpolicy)
// never lets a sandbox reach the node, another sandbox, loopback, link-local
// (cloud metadata) or multicast addresses, whatever its policy says, and
// cuts private networks (RFC 1918, CGNAT) out of it unless an allowOut entry
// names one.
var allTraffic = netip.MustParsePrefix("0.0.0.0/0")

// egressPolicy maps create's allow_internet_access and network.allowOut/denyOut
// onto dsec's allow-list egress policy (nil: loopback only). Internet access
// (E2B's default) starts from every destination, denyOut removes prefixes
// from it, and allowOut adds destinations back (E2B: allow wins over deny).
// Domain names (pypi.org, *.example.com) in allowOut become the policy's
// allowed domains (reachable once resolved through the node), in denyOut
// its denied ones (NXDOMAIN unless an allowed one matches too).
// What dsec cannot enforce is refused: an egress proxy, per-domain
// transform rules. (allowPublicTraffic and maskRequestHost are not egress:
// create keeps them as labels, ports.go applies them; a malformed mask is
// refused here, before anything is created.)
func egressPolicy(internet *bool, n *e2bapi.SandboxNetworkConfig) (*api.NetworkPolicy, error) {
	var allow []netip.Prefix
	var allowDomains, denyDomains []string
	if internet == nil || *internet {
		allow = []netip.Prefix{allTraffic}
	}
	if n != nil {
		switch {
		case n.EgressProxy != nil:
			return nil, errdefs.Invalid("network.egressProxy is not supported by dsec")
		case n.Rules != nil && len(*n.Rules) > 0:
			return nil, errdefs.Invalid("network.rules (per-domain request transforms) are not supported by dsec")
		}
		if n.MaskRequestHost != nil {
			if err := checkHostMask(*n.MaskRequestHost); err != nil {
				return nil, err
			}
		}
		for i, s := range deref(n.DenyOut) {
			p, d, err := parseDestination("denyOut", i, s)
			if err != nil {
				return nil, err
			}
			if d != "" {
				denyDomains = append(denyDomains, d)
				continue
			}
			allow = subtract(allow, p)
		}
		// The pieces of "internet" left around a denied range hold no
		// private network: one inside such a range would read as naming it
		// explicitly (netpolicy honours such entries), so it goes.
		allow = slices.DeleteFunc(allow, func(p netip.Prefix) bool {
			return neverReachable(p) || (netpolicy.Entry{Prefix: p}).Private()
		})
		for i, s := range deref(n.AllowOut) {
			p, d, err := parseDestination("allowOut", i, s)
			if err != nil {
				return nil, err
			}
			if d != "" {
				allowDomains = append(allowDomains, d)
				continue
			}
			allow = append(allow, p)
		}
	}
	if len(allow) == 0 && len(allowDomains) == 0 {
		return nil, nil // with nothing reachable, denied names change nothing
	}
	pol := &api.NetworkPolicy{Allow: make([]string, 0, len(allow)), AllowDomains: allowDomains, DenyDomains: denyDomains}
	for _, p := range allow {
		pol.Allow = append(pol.Allow, p.String())
	}
	return pol, nil
}

// updateNetwork replaces a running sandbox's egress (the SDK's
// updateNetwork): the same mapping as create's, omitted fields cleared.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.SandboxNetworkUpdateConfig
	if err := decodeBody(w, r, &req); err != nil {
		h.writeErr(w, r, err)
		return
	}
	pol, err := egressPolicy(req.AllowInternetAccess, &e2bapi.SandboxNetworkConfig{AllowOut: req.AllowOut, DenyOut: req.DenyOut,
		EgressProxy: req.EgressProxy, Rules: req.Rules})
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	sb, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if pol == nil {
		pol = &api.NetworkPolicy{} // nothing allowed: loopback only
	}
	if _, err := h.svc.SetNetwork(r.Context(), sb.ID, *pol); err != nil {
		h.writeErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// egressAsked says whether n names destinations (allowOut or denyOut).
func egressAsked(n *e2bapi.SandboxNetworkConfig) bool {
	return n != nil && (len(deref(n.AllowOut)) > 0 || len(deref(n.DenyOut)) > 0)
}

func deref(p *[]string) []string {
	if p == nil {
		return nil
	}
	return *p
}

// parseDestination reads entry i of allowOut or denyOut: an IPv4 CIDR or
// address (p), or a domain name or wildcard (d, canonical).
func parseDestination(field string, i int, s string) (p netip.Prefix, d string, err error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() {
		return p.Masked(), "", nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return netip.PrefixFrom(a, 32), "", nil
	}
	if strings.ContainsAny(s, ":/") || strings.Trim(s, "0123456789.") == "" {
		return netip.Prefix{}, "", errdefs.Invalid("network.%s[%d] %q: want an IPv4 address or CIDR, or a domain name", field, i, s)
	}
	d, err = netpolicy.ParseDomain(fmt.Sprintf("%s[%d]", field, i), s)
	return netip.Prefix{}, d, err
}

// neverReachable says whether p, a piece subtract cut out of a larger prefix,
// lies in a range no policy may name because no sandbox ever reaches it
// (netpolicy refuses "this network", loopback, link-local and multicast).
func neverReachable(p netip.Prefix) bool {
	_, err := netpolicy.ParseEntry(p.String())
	return err != nil
}

// subtract removes d from the prefixes in set: a prefix inside d goes, one
// that holds d is split into the largest prefixes around it.
func subtract(set []netip.Prefix, d netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range set {
		switch {
		case d.Bits() <= p.Bits() && d.Contains(p.Addr()):
		case p.Bits() < d.Bits() && p.Contains(d.Addr()):
			for cur := p; cur.Bits() < d.Bits(); {
				lo, hi := halves(cur)
				if lo.Contains(d.Addr()) {
					out, cur = append(out, hi), lo
				} else {
					out, cur = append(out, lo), hi
				}
			}
		default:
			out = append(out, p)
		}
	}
	return out
}

// halves splits an IPv4 prefix shorter than /32 into its two halves.
func halves(p netip.Prefix) (lo, hi netip.Prefix) {
	b := p.Addr().As4()
	bit := p.Bits()
	b[bit/8] |= 0x80 >> (bit % 8)
	return netip.PrefixFrom(p.Addr(), bit+1), netip.PrefixFrom(netip.AddrFrom4(b), bit+1)
}
