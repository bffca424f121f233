package netpolicy_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// world is one test's node: a Manager and test hosts 198.18.N.0/24.
type world struct {
	t     *testing.T
	m     *netpolicy.Manager
	dir   string
	cfg   netpolicy.Config // the Manager's, but for StateDir and Rules
	hosts []*netpolicytest.Host
}

// newWorld makes a Manager and n test hosts numbered from first (each test
// uses its own numbers, so tests may run side by side).
func newWorld(t *testing.T, first, n int, rules ...string) *world {
	t.Helper()
	return newWorldDNS(t, first, n, "off", rules...)
}

// newWorldDNS is newWorld with a Manager whose DNS forwarder asks dns.
func newWorldDNS(t *testing.T, first, n int, dns string, rules ...string) *world {
	t.Helper()
	return newWorldWith(t, first, n, netpolicy.Config{DNS: dns}, rules...)
}

// newWorldWith is newWorld with a Manager configured by cfg.
func newWorldWith(t *testing.T, first, n int, cfg netpolicy.Config, rules ...string) *world {
	t.Helper()
	netpolicytest.RequireRoot(t)
	rs := netpolicy.RuleSets{}
	for _, r := range rules {
		if err := rs.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	w := &world{t: t, dir: t.TempDir(), cfg: cfg}
	w.m = w.open(rs)
	for i := 0; i < n; i++ {
		w.hosts = append(w.hosts, netpolicytest.NewHost(t, "dsth", first+i))
	}
	t.Cleanup(func() { w.assertClean(); _ = w.m.Close() })
	return w
}

func (w *world) open(rs netpolicy.RuleSets) *netpolicy.Manager {
	w.t.Helper()
	cfg := w.cfg
	cfg.StateDir, cfg.Rules = w.dir, rs
	m, err := netpolicy.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return m
}

// sandbox is a stand-in sandbox: a fresh network namespace given to Apply
// (in a real sandbox, its init's).
func (w *world) sandbox(id string, p api.NetworkPolicy) *os.File {
	w.t.Helper()
	ns := netpolicytest.NewNetns(w.t)
	if err := w.m.Apply(context.Background(), id, ns, p); err != nil {
		w.t.Fatalf("apply %s: %v", id, err)
	}
	w.t.Cleanup(func() { _ = w.m.Release(context.Background(), id) })
	return ns
}

func (w *world) denied(id string) uint64 {
	w.t.Helper()
	st, err := w.m.Status(id)
	if err != nil || st == nil {
		w.t.Fatalf("status %s: %v %v", id, st, err)
	}
	return st.Denied
}

func (w *world) mustReach(ns *os.File, addr string) {
	w.t.Helper()
	got, err := netpolicytest.Hello(ns, addr)
	if err != nil || !strings.HasPrefix(got, "hello from") {
		w.t.Fatalf("%s: want reachable, got %q, %v", addr, got, err)
	}
}

func (w *world) mustRefuse(ns *os.File, addr string) {
	w.t.Helper()
	c, err := netpolicytest.Dial(ns, addr, 2*time.Second)
	if err == nil {
		c.Close()
		w.t.Fatalf("%s: reachable, want refused", addr)
	}
	if !netpolicytest.Refused(err) {
		w.t.Fatalf("%s: want a refusal, got %v", addr, err)
	}
}

// tableUp reports whether the Manager's table is in the kernel.
func (w *world) tableUp() bool {
	w.t.Helper()
	c, err := nftables.New()
	if err != nil {
		w.t.Fatal(err)
	}
	_, err = c.ListTableOfFamily(w.m.TableName(), nftables.TableFamilyINet)
	return err == nil
}

// assertClean checks nothing of the test's Manager is left on the host: no
// table, no record, no address claim, and ip_forward as it was once no dsec
// Manager holds it.
func (w *world) assertClean() {
	w.t.Helper()
	w.m.Settle()
	c, err := nftables.New()
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := c.ListTableOfFamily(w.m.TableName(), nftables.TableFamilyINet); err == nil {
		w.t.Errorf("table inet %s left behind", w.m.TableName())
	}
	if recs, _ := filepath.Glob(filepath.Join(w.dir, "*.json")); len(recs) > 0 {
		w.t.Errorf("records left behind: %v", recs)
	}
	if holders, _ := os.ReadDir("/run/dsec/netpolicy/forward"); len(holders) == 0 {
		if b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); strings.TrimSpace(string(b)) != initialForward {
			w.t.Errorf("ip_forward = %s after the last egress sandbox, was %s", b, initialForward)
		}
	}
}

var initialForward = func() string {
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	return strings.TrimSpace(string(b))
}()

func TestEgressAllowsOnlyWhatThePolicySays(t *testing.T) {
	w := newWorld(t, 11, 2)
	h1, h2 := w.hosts[0], w.hosts[1]
	open := h1.Listen(t, 0)
	other := h1.Listen(t, 0)
	far := h2.Listen(t, 0)
	_, openPort, _ := net.SplitHostPort(open)

	ns := w.sandbox("sb-allow", api.NetworkPolicy{Allow: []string{h1.Addr.String() + "/32:" + openPort}})
	w.mustReach(ns, open)
	if n := w.denied("sb-allow"); n != 0 {
		t.Fatalf("denied = %d after an allowed connect", n)
	}
	w.mustRefuse(ns, other) // same host, other port
	w.mustRefuse(ns, far)   // other host
	if n := w.denied("sb-allow"); n != 2 {
		t.Fatalf("denied = %d, want 2", n)
	}
	st, _ := w.m.Status("sb-allow")
	if st.Address == "" || !w.m.Pool().Contains(netip.MustParseAddr(st.Address)) {
		t.Fatalf("address %q not from the pool %s", st.Address, w.m.Pool())
	}
}

func TestNodeAndOtherSandboxesAreNeverReachable(t *testing.T) {
	w := newWorld(t, 21, 1)
	h := w.hosts[0]
	// The node listens on every address; a peer sandbox listens on its own.
	nodeAll := netpolicytest.Listen(t, nil, "0.0.0.0:0")
	_, nodePort, _ := net.SplitHostPort(nodeAll)
	nodeLo := netpolicytest.Listen(t, nil, "127.0.0.1:0")

	// Policies as wide as they come, covering the pool and every host address.
	wide := api.NetworkPolicy{Allow: []string{"0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3"}}
	ns := w.sandbox("sb-a", wide)
	peerNS := w.sandbox("sb-b", wide)
	peerSt, _ := w.m.Status("sb-b")
	peer := netpolicytest.Listen(t, peerNS, "0.0.0.0:0")
	_, peerPort, _ := net.SplitHostPort(peer)
	ownSt, _ := w.m.Status("sb-a")

	w.mustReach(ns, h.Listen(t, 0)) // the wide policy does reach the test host

	var targets []string
	for _, a := range netpolicytest.HostAddrs(t) { // eth0, the test host link, every sandbox link's node end
		targets = append(targets, net.JoinHostPort(a.String(), nodePort))
	}
	gw := netip.MustParseAddr(ownSt.Address).Prev()
	targets = append(targets, net.JoinHostPort(gw.String(), nodePort))
	targets = append(targets, net.JoinHostPort(peerSt.Address, peerPort))
	for _, addr := range targets {
		w.mustRefuse(ns, addr)
	}
	if got, want := w.denied("sb-a"), uint64(len(targets)); got != want {
		t.Fatalf("denied = %d, want %d (one per attempt)", got, want)
	}
	// Speaking with another sandbox's address: a's link carries b's address
	// as a second one, and a connects from it to the test host b may reach.
	if err := netpolicytest.In(ns, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(peerSt.Address).To4(), Mask: net.CIDRMask(32, 32)}})
	}); err != nil {
		t.Fatal(err)
	}
	got := udpSink(t, h)
	send := func(from *os.File, src string, port int, msg string) {
		t.Helper()
		if err := netpolicytest.In(from, func() error {
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(src), Port: port}, got.addr)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte(msg))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// b opens a flow from port 40000; a then sends with b's address, once on
	// a new flow and once inside b's (conntrack alone would pass that one).
	send(peerNS, peerSt.Address, 40000, "b's own")
	got.wait(t, "b's own")
	send(ns, peerSt.Address, 40001, "spoofed")
	send(ns, peerSt.Address, 40000, "injected")
	send(ns, ownSt.Address, 0, "genuine")
	if msgs := got.wait(t, "genuine"); slices.Contains(msgs, "spoofed") || slices.Contains(msgs, "injected") {
		t.Fatalf("the test host got datagrams sent with another sandbox's address: %v", msgs)
	}
	// 127.0.0.1 in a sandbox is the sandbox's own loopback, never the node's.
	_, loPort, _ := net.SplitHostPort(nodeLo)
	w.mustRefuse(ns, "127.0.0.1:"+loPort)
}

// sink is a UDP listener on a test host that records what it receives and
// echoes it.
type sink struct {
	addr *net.UDPAddr
	mu   sync.Mutex
	msgs []string
}

func udpSink(t *testing.T, h *netpolicytest.Host) *sink {
	t.Helper()
	var c *net.UDPConn
	if err := netpolicytest.In(h.NS, func() error {
		var err error
		c, err = net.ListenUDP("udp", &net.UDPAddr{IP: h.Addr.AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &sink{addr: c.LocalAddr().(*net.UDPAddr)}
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDP(buf[:n], from) // a reply: the flow is established
			s.mu.Lock()
			s.msgs = append(s.msgs, string(buf[:n]))
			s.mu.Unlock()
		}
	}()
	return s
}

// wait returns what arrived once want has (it is sent last), a little later.
func (s *sink) wait(t *testing.T, want string) []string {
	t.Helper()
	testwait.For(t, 3*time.Second, fmt.Sprintf("%q to arrive", want), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.Contains(s.msgs, want)
	})
	time.Sleep(100 * time.Millisecond) // a late (refused) message would arrive meanwhile: showing none did is the point
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.msgs...)
}

func TestPolicyChangeAppliesToNewConnections(t *testing.T) {
	w := newWorld(t, 31, 1, "mirror=198.18.31.2:1-65535")
	h := w.hosts[0]
	a := h.Listen(t, 0)
	ns := w.sandbox("sb-stage", api.NetworkPolicy{Rules: []string{"mirror"}})
	w.mustReach(ns, a)

	// A connection open across the change keeps working.
	long, err := netpolicytest.Dial(ns, net.JoinHostPort(h.Addr.String(), strings.Split(h.Listen(t, 0), ":")[1]), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()

	if err := w.m.Apply(context.Background(), "sb-stage", nil, api.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	w.mustRefuse(ns, a)
	buf := make([]byte, 64)
	_ = long.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := long.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "hello") {
		t.Fatalf("established connection after the change: %q %v", buf[:n], err)
	}
	if err := w.m.Apply(context.Background(), "sb-stage", nil, api.NetworkPolicy{Allow: []string{h.Addr.String()}}); err != nil {
		t.Fatal(err)
	}
	w.mustReach(ns, a)
	st, _ := w.m.Status("sb-stage")
	if st.Denied != 1 || len(st.Allow) != 1 || len(st.Rules) != 0 {
		t.Fatalf("status %+v", st)
	}
}

func TestNoEgressCostsNothingAndBadPoliciesTouchNothing(t *testing.T) {
	w := newWorld(t, 41, 0)
	ns := netpolicytest.NewNetns(t)
	if err := w.m.Apply(context.Background(), "sb-none", ns, api.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	if st, err := w.m.Status("sb-none"); st != nil || err != nil {
		t.Fatalf("status of a loopback-only sandbox: %+v %v", st, err)
	}
	for _, p := range []api.NetworkPolicy{
		{Allow: []string{"10.0.0.0/33"}},
		{Allow: []string{"198.18.41.2:0"}},
		{Allow: []string{"198.18.41.2:80-70000"}},
		{Rules: []string{"nope"}},
		{Allow: []string{netpolicy.DefaultPool.Addr().Next().String()}},
	} {
		err := w.m.Apply(context.Background(), "sb-bad", ns, p)
		if errdefs.CodeOf(err) != api.CodeInvalidArgument {
			t.Errorf("%+v: got %v, want invalid_argument", p, err)
		}
	}
	assertNoLinksBut(t, ns, "lo")
}

func TestRestartKeepsPolicyAndSweepRemovesLeftovers(t *testing.T) {
	w := newWorld(t, 51, 1)
	h := w.hosts[0]
	a := h.Listen(t, 0)
	ns := w.sandbox("sb-keep", api.NetworkPolicy{Allow: []string{h.Addr.String()}})
	gone := w.sandbox("sb-gone", api.NetworkPolicy{Allow: []string{h.Addr.String()}})
	goneSt, _ := w.m.Status("sb-gone")
	goneLink := netpolicytest.NodeLink(t, goneSt.Address)
	w.mustRefuse(ns, "198.18.51.1:1") // node end of the test host link: denied, counted

	// A sandbox released just before a crash: record gone, rules not yet.
	orphanNS := netpolicytest.NewNetns(t)
	if err := w.m.Apply(context.Background(), "sb-orphan", orphanNS, api.NetworkPolicy{Allow: []string{h.Addr.String()}}); err != nil {
		t.Fatal(err)
	}
	orphanSt, _ := w.m.Status("sb-orphan")
	orphanLink := netpolicytest.NodeLink(t, orphanSt.Address)
	if err := os.Remove(filepath.Join(w.dir, "sb-orphan.json")); err != nil {
		t.Fatal(err)
	}
	orphanNS.Close()

	// A new agent process: the same state dir, nothing closed in the kernel.
	w.m = w.open(netpolicy.RuleSets{})
	c, _ := nftables.New()
	if _, err := c.ListChain(&nftables.Table{Name: w.m.TableName(), Family: nftables.TableFamilyINet}, "p-"+orphanLink); err == nil {
		t.Errorf("the orphaned chain p-%s survived the restart", orphanLink)
	}
	st, err := w.m.Status("sb-keep")
	if err != nil || st == nil || st.Denied != 1 || st.Allow[0] != h.Addr.String() {
		t.Fatalf("status after restart: %+v %v", st, err)
	}
	w.mustReach(ns, a)
	w.mustRefuse(ns, "198.18.51.1:1")

	w.m.Sweep(context.Background(), map[string]bool{"sb-keep": true})
	w.m.Settle() // its namespace is still open here: the link goes by delete, after a wait
	if st, _ := w.m.Status("sb-gone"); st != nil {
		t.Fatalf("swept sandbox still has status %+v", st)
	}
	assertNoLinksBut(t, gone, "lo")
	netpolicytest.AwaitLinksGone(t, 0, goneLink)
	w.mustReach(ns, a)
	w.m.Sweep(context.Background(), map[string]bool{})
	w.m.Settle()
	assertNoLinksBut(t, ns, "lo")
}

func assertNoLinksBut(t *testing.T, ns *os.File, want ...string) {
	t.Helper()
	var names []string
	_ = netpolicytest.In(ns, func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		return err
	})
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("links %v, want %v", names, want)
	}
}

func newBenchManager(b *testing.B) *netpolicy.Manager {
	b.Helper()
	m, err := netpolicy.New(netpolicy.Config{StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	return m
}

// TestStaleManagerIsPruned: a Manager that vanished for good (its state dir
// removed without releasing, as a killed test leaves it) does not hold
// ip_forward, its table or its addresses forever: the next Manager to take
// or give up the hold removes them.
func TestStaleManagerIsPruned(t *testing.T) {
	netpolicytest.RequireRoot(t)
	dead := t.TempDir()
	m1, err := netpolicy.New(netpolicy.Config{StateDir: dead})
	if err != nil {
		t.Fatal(err)
	}
	ns := netpolicytest.NewNetns(t)
	if err := m1.Apply(context.Background(), "sb-dead", ns, api.NetworkPolicy{Allow: []string{"198.18.61.0/24"}}); err != nil {
		t.Fatal(err)
	}
	st, _ := m1.Status("sb-dead")
	ns.Close()
	if err := os.RemoveAll(dead); err != nil { // the "crash": nothing released
		t.Fatal(err)
	}
	c, _ := nftables.New()
	if _, err := c.ListTableOfFamily(m1.TableName(), nftables.TableFamilyINet); err != nil {
		t.Fatalf("the dead manager's table should still be there: %v", err)
	}

	w := newWorld(t, 62, 0)
	w.sandbox("sb-live", api.NetworkPolicy{Allow: []string{"198.18.62.0/24"}})
	if _, err := c.ListTableOfFamily(m1.TableName(), nftables.TableFamilyINet); err == nil {
		t.Errorf("the dead manager's table %s is still there", m1.TableName())
	}
	claim := "/run/dsec/netpolicy/addr/" + netip.MustParseAddr(st.Address).Prev().String()
	if _, err := os.Stat(claim); err == nil {
		t.Errorf("the dead manager's address claim %s is still there", claim)
	}
}

// TestInternetExcludesPrivateRanges: "internet" (0.0.0.0/0) reaches a
// public address but no private network (RFC 1918, CGNAT) and not the node;
// a policy that names a private address explicitly reaches it.
func TestInternetExcludesPrivateRanges(t *testing.T) {
	w := newWorld(t, 41, 1)
	public := w.hosts[0].Listen(t, 0)
	rfc1918 := netpolicytest.NewHostIn(t, "dsth", 42, netip.MustParsePrefix("172.31.42.0/24")).Listen(t, 0)
	cgnat := netpolicytest.NewHostIn(t, "dsth", 43, netip.MustParsePrefix("100.64.43.0/24")).Listen(t, 0)
	node := netpolicytest.Listen(t, nil, "0.0.0.0:0")
	_, nodePort, _ := net.SplitHostPort(node)

	internet := w.sandbox("sb-inet", api.NetworkPolicy{Allow: []string{"0.0.0.0/0"}})
	w.mustReach(internet, public)
	w.mustRefuse(internet, rfc1918)
	w.mustRefuse(internet, cgnat)
	w.mustRefuse(internet, net.JoinHostPort(w.hosts[0].NodeAddr.String(), nodePort))
	if got := w.denied("sb-inet"); got != 3 {
		t.Fatalf("denied = %d, want 3", got)
	}

	// An allow entry inside a private range is honoured; the others stay cut out.
	host, _, _ := net.SplitHostPort(rfc1918)
	named := w.sandbox("sb-named", api.NetworkPolicy{Allow: []string{"0.0.0.0/0", host}})
	w.mustReach(named, rfc1918)
	w.mustReach(named, public)
	w.mustRefuse(named, cgnat)
}

// TestTableStaysBrieflyAfterTheLastSandbox: the last egress sandbox's
// release leaves the table for TableLinger (a sandbox made in that time
// adds only its own chain and reaches what its policy allows), then the
// table goes while the Manager is still open.
func TestTableStaysBrieflyAfterTheLastSandbox(t *testing.T) {
	const linger = 1500 * time.Millisecond
	w := newWorldWith(t, 77, 1, netpolicy.Config{DNS: "off", TableLinger: linger})
	target := w.hosts[0].Listen(t, 0)
	p := api.NetworkPolicy{Allow: []string{w.hosts[0].Addr.String() + "/32"}}
	ctx := context.Background()
	for round, id := range []string{"sb-linger-a", "sb-linger-b"} {
		ns := netpolicytest.NewNetns(t)
		if err := w.m.Apply(ctx, id, ns, p); err != nil {
			t.Fatalf("round %d: apply: %v", round, err)
		}
		w.mustReach(ns, target)
		if err := w.m.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Now()
	if !w.tableUp() {
		t.Fatal("the table went with the last sandbox's release, want it kept for TableLinger")
	}
	if !testwait.Until(linger+10*time.Second, func() bool { return !w.tableUp() }) {
		t.Fatalf("table inet %s still there %v after the last sandbox left (TableLinger %v)", w.m.TableName(), time.Since(released), linger)
	}
	if d := time.Since(released); d < linger {
		t.Errorf("the table went %v after the last sandbox left, before TableLinger (%v)", d, linger)
	}
}

// TestLingeringTableSurvivesAnotherManager: while a Manager's table lingers
// after its last sandbox (no record in its state dir), another Manager on
// the host taking the forwarding hold must not prune it as a holder gone for
// good: the first Manager's next sandbox gets egress. Pruned, its table was
// gone and that sandbox's rules failed with ENOENT.
func TestLingeringTableSurvivesAnotherManager(t *testing.T) {
	w := newWorldWith(t, 78, 1, netpolicy.Config{DNS: "off", TableLinger: time.Minute})
	target := w.hosts[0].Listen(t, 0)
	p := api.NetworkPolicy{Allow: []string{w.hosts[0].Addr.String() + "/32"}}
	ctx := context.Background()
	ns := netpolicytest.NewNetns(t)
	if err := w.m.Apply(ctx, "sb-linger-1", ns, p); err != nil {
		t.Fatal(err)
	}
	w.mustReach(ns, target)
	if err := w.m.Release(ctx, "sb-linger-1"); err != nil {
		t.Fatal(err)
	}
	other, err := netpolicy.New(netpolicy.Config{StateDir: t.TempDir(), DNS: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Apply(ctx, "sb-other", netpolicytest.NewNetns(t), p); err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx, "sb-other")
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListTableOfFamily(w.m.TableName(), nftables.TableFamilyINet); err != nil {
		t.Fatalf("table inet %s went when another Manager took the forwarding hold: %v", w.m.TableName(), err)
	}
	ns2 := netpolicytest.NewNetns(t)
	if err := w.m.Apply(ctx, "sb-linger-2", ns2, p); err != nil {
		t.Fatalf("the next sandbox after the linger: %v", err)
	}
	w.mustReach(ns2, target)
	if err := w.m.Release(ctx, "sb-linger-2"); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseAfterClose: a sandbox released after its Manager closed (a
// delete's teardown still running while its node shuts down) leaves what a
// release before Close would have: the table and the hold on forwarding go
// at once, not after a linger the closed Manager would never see end; and
// nothing is added after Close. Before, the late release armed the linger
// again and a Manager in a namespace of its own left its directory behind.
func TestReleaseAfterClose(t *testing.T) {
	w := newWorldWith(t, 79, 1, netpolicy.Config{DNS: "off", TableLinger: time.Hour})
	p := api.NetworkPolicy{Allow: []string{w.hosts[0].Addr.String() + "/32"}}
	ctx := context.Background()
	if err := w.m.Apply(ctx, "sb-late", netpolicytest.NewNetns(t), p); err != nil {
		t.Fatal(err)
	}
	if err := w.m.Close(); err != nil {
		t.Fatal(err)
	}
	if !w.tableUp() {
		t.Fatal("Close dropped the table of a sandbox still attached")
	}
	if err := w.m.Apply(ctx, "sb-after", netpolicytest.NewNetns(t), p); !errdefs.Is(err, api.CodeUnavailable) {
		t.Errorf("apply after Close: %v, want unavailable", err)
	}
	if err := w.m.Release(ctx, "sb-late"); err != nil {
		t.Fatal(err)
	}
	w.m.Settle()
	if w.tableUp() {
		t.Fatalf("table inet %s kept after the last sandbox left a closed Manager", w.m.TableName())
	}
}
