package netpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A /31 of the pool is handed out only when nothing on the host holds one of
// its addresses or routes to it. The claims under Config.HostDir coordinate
// the dsec Managers that share that directory, but they are not the truth:
// a Manager whose state dir was removed while its sandboxes lived on has
// its claims pruned (pruneStale) though its links still hold the addresses,
// and a node started with another HostDir (another mount namespace, another
// build) claims nothing here. A second link with the same /31 gives the host
// two routes for one prefix, and one of the two sandboxes silently loses
// its replies. So every candidate pair is checked against the kernel.

// use is something on the host that holds a pool address: an address on a
// link, or a route into the pool through a link.
type use struct {
	What string // "address 10.203.0.0/31" or "route 10.203.0.0/31"
	Link string // the link that holds it
}

func (u use) String() string { return u.What + " on " + u.Link }

// pairInUse reports what on the host holds an address of the /31 starting
// at a; nil if nothing does. A route lookup per address decides cheaply
// (the usual answer: through the default route, or unreachable); only when
// one is local or directly connected are the addresses and routes listed to
// name the holder. A connected route broader than the pool (a LAN the pool
// overlaps) is not a holder: Manager.New reports that overlap once.
func pairInUse(pool netip.Prefix, a netip.Addr) (*use, error) {
	pair := netip.PrefixFrom(a, 31)
	suspect := false
	for _, x := range []netip.Addr{a, a.Next()} {
		rs, err := netlink.RouteGet(x.AsSlice())
		if err != nil {
			// No route at all is the plain answer; anything else (a
			// blackhole or prohibit route, say) is decided by the listing.
			if !errors.Is(err, unix.ENETUNREACH) {
				suspect = true
			}
			continue
		}
		for _, r := range rs {
			if r.Type == unix.RTN_LOCAL || r.Gw == nil {
				suspect = true
			}
		}
	}
	if !suspect {
		return nil, nil
	}
	uses, err := poolUses(pool)
	if err != nil {
		return nil, err
	}
	for _, u := range uses {
		if (u.addr && pair.Contains(u.prefix.Addr())) || (!u.addr && u.prefix.Bits() >= pool.Bits() && u.prefix.Overlaps(pair)) {
			return &u.use, nil
		}
	}
	return nil, nil
}

// poolUse is one address or route of the host overlapping the pool.
type poolUse struct {
	use
	prefix netip.Prefix // the address (with its prefix length) or the route's destination
	addr   bool         // an address, not a route
}

// poolUses lists every address and route (in any routing table) of the host
// that overlaps pool.
func poolUses(pool netip.Prefix) ([]poolUse, error) {
	names := map[int]string{}
	name := func(idx int) string {
		if n, ok := names[idx]; ok {
			return n
		}
		n := fmt.Sprintf("ifindex %d", idx)
		if idx == 0 {
			n = "no link"
		} else if l, err := netlink.LinkByIndex(idx); err == nil {
			n = l.Attrs().Name
		}
		names[idx] = n
		return n
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []poolUse
	for _, ad := range addrs {
		p, ok := prefixOf(ad.IPNet)
		if !ok || !pool.Contains(p.Addr()) {
			continue
		}
		out = append(out, poolUse{use: use{What: "address " + p.String(), Link: name(ad.LinkIndex)}, prefix: p, addr: true})
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		p, ok := prefixOf(r.Dst)
		p = p.Masked()
		if !ok || p.Bits() == 0 || !p.Overlaps(pool) || r.Type == unix.RTN_LOCAL || r.Type == unix.RTN_BROADCAST {
			continue // the default route, and the kernel's entries for addresses listed above
		}
		out = append(out, poolUse{use: use{What: "route " + p.String(), Link: name(r.LinkIndex)}, prefix: p})
	}
	return out, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a, bits), true
}
