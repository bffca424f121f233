package netpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// sandboxIf is the name of the sandbox's end of its veth.
const sandboxIf = "eth0"

// link is one sandbox's veth pair: host end ifname with address host/31, the
// sandbox end eth0 with addr/31 and a default route through host.
type link struct {
	ifname string
	host   netip.Addr
	addr   netip.Addr
}

// create makes the pair with the peer directly in ns and configures both
// ends. It runs in two steps so the caller can put the rules in place
// meanwhile: create gives the pair its addresses with both ends down (no
// packet can pass; the sandbox cannot raise its end without CAP_NET_ADMIN),
// and the returned up brings both ends up and adds the sandbox's default
// route; up(false) instead releases what create made. On an error of either
// step nothing is left (deleting the host end deletes the pair).
func (l link) create(ns *os.File) (up func(activate bool) error, err error) {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: l.ifname, TxQLen: -1},
		PeerName:      sandboxIf,
		PeerTxQLen:    -1,
		PeerNamespace: netlink.NsFd(ns.Fd()),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("create veth %s: %w", l.ifname, err)
	}
	var h *netlink.Handle
	fail := func(err error) (func(bool) error, error) {
		if h != nil {
			h.Close()
		}
		_ = l.remove()
		return nil, err
	}
	if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: ipnet(l.host, 31)}); err != nil {
		return fail(fmt.Errorf("address %s on %s: %w", l.host, l.ifname, err))
	}
	h, err = netlink.NewHandleAt(netns.NsHandle(ns.Fd()), unix.NETLINK_ROUTE)
	if err != nil {
		return fail(fmt.Errorf("netlink in sandbox namespace: %w", err))
	}
	peer, err := h.LinkByName(sandboxIf)
	if err != nil {
		return fail(fmt.Errorf("find %s in sandbox: %w", sandboxIf, err))
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: ipnet(l.addr, 31)}); err != nil {
		return fail(fmt.Errorf("address %s in sandbox: %w", l.addr, err))
	}
	return func(activate bool) error {
		defer h.Close()
		if !activate {
			return l.remove()
		}
		var err error
		switch {
		case netlink.LinkSetUp(veth) != nil:
			err = fmt.Errorf("up %s", l.ifname)
		case h.LinkSetUp(peer) != nil:
			err = fmt.Errorf("up %s in sandbox", sandboxIf)
		}
		if err == nil {
			if rerr := h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: l.host.AsSlice()}); rerr != nil {
				err = fmt.Errorf("default route in sandbox: %w", rerr)
			}
		}
		if err != nil {
			_ = l.remove()
		}
		return err
	}, nil
}

// exists reports whether the host end is present.
func (l link) exists() bool {
	_, err := netlink.LinkByName(l.ifname)
	return err == nil
}

// remove deletes the pair; a pair already gone (its sandbox namespace died
// and took it along) is not an error.
func (l link) remove() error {
	found, err := netlink.LinkByName(l.ifname)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err == nil {
		err = netlink.LinkDel(found)
	}
	if err == nil || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return fmt.Errorf("delete veth %s: %w", l.ifname, err)
}

// lookup returns the host end, nil if it is gone.
func (l link) lookup() (netlink.Link, error) {
	found, err := netlink.LinkByName(l.ifname)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	return found, err
}

// awaitGone polls until the link with index idx no longer exists (or has
// been replaced by another of that index); false if it is still there after d.
func (l link) awaitGone(idx int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		found, err := netlink.LinkByIndex(idx)
		if err != nil || found.Attrs().Name != l.ifname {
			var nf netlink.LinkNotFoundError
			if err == nil || errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
}

// removeIndex deletes the link with index idx if it still is this one.
func (l link) removeIndex(idx int) error {
	found, err := netlink.LinkByIndex(idx)
	if err != nil || found.Attrs().Name != l.ifname {
		return nil
	}
	if err := netlink.LinkDel(found); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete veth %s: %w", l.ifname, err)
	}
	return nil
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}
