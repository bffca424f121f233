package netpolicy_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestDomainRules: a sandbox allowed pypi.org and *.example.com, and no
// address, reaches what those names resolve to once it has resolved them
// through the node (whatever resolver it asks), for the record's TTL, and
// nothing else: not another name's address, not a private address an
// allowed name resolves to. Denied names are NXDOMAIN; AAAA queries are
// answered with no record. The resolver is a
// test host the test runs; every address is a test host's.
func TestDomainRules(t *testing.T) {
	w := newWorldDNS(t, 51, 4, "198.18.51.2:53")
	resolver, pypi, files, other := w.hosts[0], w.hosts[1], w.hosts[2], w.hosts[3]
	private := netpolicytest.NewHostIn(t, "dsth", 55, netip.MustParsePrefix("172.31.55.0/24"))
	netpolicytest.DNSServer(t, resolver.NS, "198.18.51.2:53", 1, map[string]netip.Addr{
		"pypi.org":           pypi.Addr,
		"files.example.com":  files.Addr,
		"other.org":          other.Addr,
		"example.com":        other.Addr,
		"rebind.example.com": private.Addr,
		"v6.example.com":     netip.MustParseAddr("2001:db8::1"),
	})
	pypiL, filesL, otherL, privL := pypi.Listen(t, 0), files.Listen(t, 0), other.Listen(t, 0), private.Listen(t, 0)

	ns := w.sandbox("sb-dom", api.NetworkPolicy{AllowDomains: []string{"PyPI.org.", "*.example.com"}})
	if st, _ := w.m.Status("sb-dom"); st == nil || !slices.Equal(st.AllowDomains, []string{"pypi.org", "*.example.com"}) {
		t.Fatalf("status %+v, want the domains, canonical", st)
	}
	w.mustRefuse(ns, pypiL) // not resolved yet

	// The sandbox asks a resolver that does not exist: the node answers.
	lookup := func(name string, tcp bool, want netip.Addr, rcode dnsmessage.RCode) {
		t.Helper()
		got, rc, err := netpolicytest.Lookup(ns, "203.0.113.53:53", name, tcp)
		if err != nil || rc != rcode || (want.IsValid() && !slices.Equal(got, []netip.Addr{want})) {
			t.Fatalf("lookup %s: %v %v %v, want %v %v", name, got, rc, err, want, rcode)
		}
	}
	lookup("pypi.org", false, pypi.Addr, dnsmessage.RCodeSuccess)
	start := time.Now()
	w.mustReach(ns, pypiL)
	lookup("files.example.com", true, files.Addr, dnsmessage.RCodeSuccess)
	w.mustReach(ns, filesL)
	lookup("other.org", false, other.Addr, dnsmessage.RCodeSuccess) // resolved, not allowed
	w.mustRefuse(ns, otherL)
	lookup("example.com", false, other.Addr, dnsmessage.RCodeSuccess) // *.example.com is below it only
	w.mustRefuse(ns, otherL)
	lookup("rebind.example.com", false, private.Addr, dnsmessage.RCodeSuccess) // allowed name, private address
	w.mustRefuse(ns, privL)

	// No AAAA answer reaches a sandbox (its link is IPv4 only), though the
	// resolver has one.
	v6 := []netip.Addr{netip.MustParseAddr("2001:db8::1")}
	if got, _, err := netpolicytest.LookupType(resolver.NS, "198.18.51.2:53", "v6.example.com", dnsmessage.TypeAAAA, false); err != nil || !slices.Equal(got, v6) {
		t.Fatalf("the resolver's own AAAA answer: %v %v, want %v", got, err, v6)
	}
	for _, name := range []string{"v6.example.com", "pypi.org", "other.org"} {
		for _, tcp := range []bool{false, true} {
			got, rc, err := netpolicytest.LookupType(ns, "203.0.113.53:53", name, dnsmessage.TypeAAAA, tcp)
			if err != nil || rc != dnsmessage.RCodeSuccess || len(got) != 0 {
				t.Fatalf("AAAA %s (tcp %v): %v %v %v, want no record, NOERROR", name, tcp, got, rc, err)
			}
		}
	}

	// The TTL (1 s, held at least 5 s) runs out: new connections are refused.
	var dialErr error
	if !testwait.Until(15*time.Second, func() bool {
		c, err := netpolicytest.Dial(ns, pypiL, time.Second)
		if err != nil {
			dialErr = err
			return true
		}
		c.Close()
		return false
	}) {
		t.Fatal("pypi.org still reachable 15 s after its 1 s record")
	}
	if !netpolicytest.Refused(dialErr) {
		t.Fatalf("after the TTL: %v, want a refusal", dialErr)
	}
	if held := time.Since(start); held < 4*time.Second {
		t.Fatalf("learned address gone after %v, want at least ~5 s", held)
	}

	// A new policy forgets what the old names taught.
	if err := w.m.Apply(context.Background(), "sb-dom", ns, api.NetworkPolicy{AllowDomains: []string{"pypi.org"}}); err != nil {
		t.Fatal(err)
	}
	w.mustRefuse(ns, filesL)

	// Denied names are NXDOMAIN; with internet access the rest resolves.
	deny := w.sandbox("sb-deny", api.NetworkPolicy{Allow: []string{"0.0.0.0/0"}, DenyDomains: []string{"other.org"}})
	if _, rc, err := netpolicytest.Lookup(deny, "203.0.113.53:53", "other.org", false); err != nil || rc != dnsmessage.RCodeNameError {
		t.Fatalf("denied name: rcode %v, %v; want NXDOMAIN", rc, err)
	}
	if got, _, err := netpolicytest.Lookup(deny, "203.0.113.53:53", "pypi.org", false); err != nil || !slices.Equal(got, []netip.Addr{pypi.Addr}) {
		t.Fatalf("pypi.org: %v %v", got, err)
	}
}
