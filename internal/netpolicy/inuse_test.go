package netpolicy_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// logBuf collects a Manager's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// poolWorld is a world whose Manager has its own pool, host directory and
// log. The caller registers w.assertClean (after the last release of any
// Manager sharing the host's forwarding with it).
func poolWorld(t *testing.T, pool, hostDir string, hosts ...*netpolicytest.Host) (*world, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	w := &world{t: t, dir: t.TempDir(), hosts: hosts}
	m, err := netpolicy.New(netpolicy.Config{StateDir: w.dir, Pool: netip.MustParsePrefix(pool), HostDir: hostDir,
		Logger: slog.New(slog.NewTextHandler(lb, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.m = m
	return w, lb
}

// holdPair makes a link on the node holding addr/31 and up (with its
// route), as a sandbox link of another node, or one a dead node left, does.
func holdPair(t *testing.T, name, addr string) {
	t.Helper()
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l) // a leftover of a killed run
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, TxQLen: -1}, PeerName: name + "p", PeerTxQLen: -1}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	a := netip.MustParseAddr(addr)
	if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(31, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
}

// TestPoolSkipsPairHeldOnHost: a /31 of the pool that a link on the node
// holds, with no claim saying so, is reported at start-up and at
// allocation, and the sandbox gets the next pair, with egress that works.
func TestPoolSkipsPairHeldOnHost(t *testing.T) {
	netpolicytest.RequireRoot(t)
	holdPair(t, "dsnpheld0", "10.209.71.0")
	h := netpolicytest.NewHost(t, "dsth", 71)
	w, log := poolWorld(t, "10.209.71.0/29", "", h)
	t.Cleanup(w.assertClean)
	if s := log.String(); !strings.Contains(s, "10.209.71.0/31") || !strings.Contains(s, "dsnpheld0") {
		t.Errorf("start-up scan did not report the held pair; log:\n%s", s)
	}
	a := h.Listen(t, 0)
	ns := w.sandbox("sb-held", api.NetworkPolicy{Allow: []string{h.Addr.String()}})
	st, err := w.m.Status("sb-held")
	if err != nil || st == nil {
		t.Fatalf("status: %+v %v", st, err)
	}
	if st.Address != "10.209.71.3" {
		t.Errorf("sandbox address %s, want 10.209.71.3 (10.209.71.0/31 is held by dsnpheld0)", st.Address)
	}
	w.mustReach(ns, a)
	if n := w.m.PairsInUse(); n != 1 {
		t.Errorf("PairsInUse = %d, want 1", n)
	}
	if s := log.String(); !strings.Contains(s, "pair in use on the host") || !strings.Contains(s, "link=dsnpheld0") {
		t.Errorf("allocation did not report the held pair; log:\n%s", s)
	}
}

// TestTwoNodesShareOneHost: two nodes on one host whose claims are not
// shared (each its own host directory, as nodes in different mount
// namespaces, or one whose claims were pruned while its sandboxes lived on)
// draw from the same pool; each sandbox still gets an address of its own
// and egress that works, both at once.
func TestTwoNodesShareOneHost(t *testing.T) {
	netpolicytest.RequireRoot(t)
	h := netpolicytest.NewHost(t, "dsth", 72)
	a := h.Listen(t, 0)
	allow := api.NetworkPolicy{Allow: []string{h.Addr.String()}}
	w1, _ := poolWorld(t, "10.209.72.0/29", t.TempDir(), h)
	w2, log2 := poolWorld(t, "10.209.72.0/29", t.TempDir(), h)
	t.Cleanup(func() { w1.assertClean(); w2.assertClean() }) // after both releases
	ns1 := w1.sandbox("sb-node1", allow)
	ns2 := w2.sandbox("sb-node2", allow)
	st1, _ := w1.m.Status("sb-node1")
	st2, _ := w2.m.Status("sb-node2")
	if st1 == nil || st2 == nil {
		t.Fatalf("status %+v, %+v", st1, st2)
	}
	if st1.Address == st2.Address {
		t.Errorf("both sandboxes have address %s, want two different ones", st1.Address)
	}
	for i := 0; i < 3; i++ { // both, more than once: a shared prefix sends some replies astray
		w1.mustReach(ns1, a)
		w2.mustReach(ns2, a)
	}
	if !strings.Contains(log2.String(), "pair in use on the host") {
		t.Errorf("node 2 did not report node 1's pair; log:\n%s", log2.String())
	}
	for _, w := range []*world{w1, w2} {
		if n := w.denied(map[*world]string{w1: "sb-node1", w2: "sb-node2"}[w]); n != 0 {
			t.Errorf("denied = %d, want 0", n)
		}
	}
}

// TestPoolUnderBroaderRoutes: routes of the host that cover the whole pool
// (a blackhole route for a larger private range, as some hosts keep) do
// not hold any pair: the sandbox gets the first one, with egress.
func TestPoolUnderBroaderRoutes(t *testing.T) {
	netpolicytest.RequireRoot(t)
	r := &netlink.Route{Dst: &net.IPNet{IP: net.IPv4(10, 209, 73, 0), Mask: net.CIDRMask(24, 32)}, Type: unix.RTN_BLACKHOLE}
	if err := netlink.RouteAdd(r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.RouteDel(r) })
	h := netpolicytest.NewHost(t, "dsth", 73)
	w, log := poolWorld(t, "10.209.73.0/29", "", h)
	t.Cleanup(w.assertClean)
	if s := log.String(); !strings.Contains(s, "overlaps a route of the host") || !strings.Contains(s, "10.209.73.0/24") {
		t.Errorf("start-up scan did not report the broader route; log:\n%s", s)
	}
	a := h.Listen(t, 0)
	ns := w.sandbox("sb-under", api.NetworkPolicy{Allow: []string{h.Addr.String()}})
	if st, _ := w.m.Status("sb-under"); st == nil || st.Address != "10.209.73.1" {
		t.Errorf("sandbox network %+v, want address 10.209.73.1", st)
	}
	w.mustReach(ns, a)
	if n := w.m.PairsInUse(); n != 0 {
		t.Errorf("PairsInUse = %d, want 0", n)
	}
}
