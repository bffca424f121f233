// Package netpolicytest builds the little networks the network-policy tests
// need, all inside the test's own namespaces: bare network namespaces (held
// by a file descriptor, so they vanish with the test and leave no mount
// behind), test hosts reached over a veth from the node and running TCP
// listeners, and dialing from inside a namespace. Traffic only ever goes to
// loopback or to these hosts. Everything needs root.
package netpolicytest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RequireRoot skips t unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, veth, nftables)")
	}
}

// NewNetns creates a network namespace with loopback up and returns a file
// descriptor holding it; it goes away when t ends.
func NewNetns(t testing.TB) *os.File {
	t.Helper()
	ns, err := newNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	if err := In(ns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func newNetns() (*os.File, error) {
	errc := make(chan error, 1)
	var ns *os.File
	go func() {
		// This thread ends in the new namespace and is never unlocked, so the
		// runtime discards it when the goroutine returns.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare net: %w", err)
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		ns = f
		errc <- err
	}()
	return ns, <-errc
}

// In runs fn on an OS thread inside ns. Sockets fn creates belong to ns and
// keep working after In returns.
func In(ns *os.File, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, err) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Dial connects to addr over TCP from inside ns.
func Dial(ns *os.File, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := In(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	return c, err
}

// Refused reports whether err is a refusal (RST or an ICMP unreachable): the
// answer a policy gives, as opposed to a timeout.
func Refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// Listen opens a TCP listener on addr inside ns (nil: the caller's own
// namespace) that answers every connection with "hello from <addr>\n" and
// closes it. It stops when t ends.
func Listen(t testing.TB, ns *os.File, addr string) string {
	t.Helper()
	var ln net.Listener
	listen := func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}
	var err error
	if ns == nil {
		err = listen()
	} else {
		err = In(ns, listen)
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "hello from %s\n", ln.Addr())
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// Hello dials addr from ns and returns the greeting a Listen listener sends.
func Hello(ns *os.File, addr string) (string, error) {
	c, err := Dial(ns, addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// Host is a test host: a network namespace linked to the node by a veth,
// the node's end NodeAddr/24 and the host's end Addr/24.
type Host struct {
	NS       *os.File
	Link     string // the node's end of the veth
	NodeAddr netip.Addr
	Addr     netip.Addr
}

// NewHost makes test host n (1-250) in 198.18.n.0/24 (the benchmarking
// range, RFC 2544: never a real destination). The veth is named
// prefix+n on the node; it is removed when t ends.
func NewHost(t testing.TB, prefix string, n int) *Host {
	t.Helper()
	return NewHostIn(t, prefix, n, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(n), 0}), 24))
}

// NewHostIn makes a test host in the /24 net (the node's end .1, the host's
// .2), e.g. in a private range; the veth is named prefix+n on the node.
func NewHostIn(t testing.TB, prefix string, n int, net netip.Prefix) *Host {
	t.Helper()
	b := net.Masked().Addr().As4()
	node, host := b, b
	node[3], host[3] = 1, 2
	h := &Host{
		NS:       NewNetns(t),
		Link:     prefix + strconv.Itoa(n),
		NodeAddr: netip.AddrFrom4(node),
		Addr:     netip.AddrFrom4(host),
	}
	if err := h.setup(); err != nil {
		t.Fatalf("test host %d: %v", n, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(h.Link); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	return h
}

func (h *Host) setup() error {
	if l, err := netlink.LinkByName(h.Link); err == nil {
		_ = netlink.LinkDel(l) // a leftover of a killed run
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: h.Link, TxQLen: -1}, PeerName: "eth0",
		PeerTxQLen: -1, PeerNamespace: netlink.NsFd(h.NS.Fd())}
	if err := netlink.LinkAdd(veth); err != nil {
		return err
	}
	if err := netlink.AddrAdd(veth, addr(h.NodeAddr, 24)); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return err
	}
	nh, err := netlink.NewHandleAt(netns.NsHandle(h.NS.Fd()), unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer nh.Close()
	peer, err := nh.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := nh.AddrAdd(peer, addr(h.Addr, 24)); err != nil {
		return err
	}
	if err := nh.LinkSetUp(peer); err != nil {
		return err
	}
	// Routed peers (see Plain) reach the host through the node.
	return nh.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: h.NodeAddr.AsSlice()})
}

// Listen starts a listener on the host at port (0: any) and returns its address.
func (h *Host) Listen(t testing.TB, port int) string {
	return Listen(t, h.NS, net.JoinHostPort(h.Addr.String(), strconv.Itoa(port)))
}

// Plain makes a namespace linked to the node by a plain veth (node end
// link, addresses node/31 and node+1/31, default route through the node),
// with no policy at all: the baseline a policed sandbox is compared with.
func Plain(t testing.TB, link string, node netip.Addr) *os.File {
	t.Helper()
	ns := NewNetns(t)
	if l, err := netlink.LinkByName(link); err == nil {
		_ = netlink.LinkDel(l)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link, TxQLen: -1}, PeerName: "eth0",
		PeerTxQLen: -1, PeerNamespace: netlink.NsFd(ns.Fd())}
	must := func(err error) {
		if err != nil {
			t.Helper()
			t.Fatalf("plain namespace: %v", err)
		}
	}
	must(netlink.LinkAdd(veth))
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(link); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	must(netlink.AddrAdd(veth, addr(node, 31)))
	must(netlink.LinkSetUp(veth))
	nh, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()), unix.NETLINK_ROUTE)
	must(err)
	defer nh.Close()
	peer, err := nh.LinkByName("eth0")
	must(err)
	must(nh.AddrAdd(peer, addr(node.Next(), 31)))
	must(nh.LinkSetUp(peer))
	must(nh.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: node.AsSlice()}))
	return ns
}

func addr(a netip.Addr, bits int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}}
}

// HostAddrs lists the node's own IPv4 addresses (every interface but
// loopback), for tests that prove a sandbox cannot reach them.
func HostAddrs(t testing.TB) []netip.Addr {
	t.Helper()
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if ok && !ip.IsLoopback() {
			out = append(out, ip)
		}
	}
	return out
}

// NodeLink returns the name of the node's end of the link of the sandbox
// whose address is sandboxAddr (the node's end holds the address below it).
func NodeLink(t testing.TB, sandboxAddr string) string {
	t.Helper()
	node := netip.MustParseAddr(sandboxAddr).Prev()
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip == node {
			l, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				t.Fatal(err)
			}
			return l.Attrs().Name
		}
	}
	t.Fatalf("no link on the node holds %s (sandbox %s)", node, sandboxAddr)
	return ""
}

// AwaitLinksGone fails t unless every named link is gone within d.
func AwaitLinksGone(t testing.TB, d time.Duration, names ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, name := range names {
		for {
			if _, err := netlink.LinkByName(name); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("link %s still on the node", name)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
