package container_test

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestDomainRuleInRealSandbox: a real sandbox allowed only pypi.org resolves
// it with its image's own resolv.conf (a resolver it cannot reach: the node
// answers) through a resolver the test runs, and connects by name; the
// address is refused before it was resolved, and another name's address
// stays refused after it was.
func TestDomainRuleInRealSandbox(t *testing.T) {
	lower := requireImage(t, "debian")
	resolver := netpolicytest.NewHost(t, "dstc", 65)
	pypi := netpolicytest.NewHost(t, "dstc", 66)
	other := netpolicytest.NewHost(t, "dstc", 67)
	netpolicytest.DNSServer(t, resolver.NS, "198.18.65.2:53", 60, map[string]netip.Addr{
		"pypi.org": pypi.Addr, "other.org": other.Addr})
	pypiL, otherL := pypi.Listen(t, 0), other.Listen(t, 0)
	_, port, _ := net.SplitHostPort(pypiL)
	_, otherPort, _ := net.SplitHostPort(otherL)

	d, _ := netDriverWith(t, netpolicy.Config{DNS: "198.18.65.2:53"})
	sb := startNet(t, d, lower, &api.NetworkPolicy{AllowDomains: []string{"pypi.org"}})
	if out, ok := tcp(t, sb, pypiL); ok {
		t.Fatalf("pypi.org's address reachable before it was resolved: %q", out)
	}
	if out, ok := tcp(t, sb, "pypi.org:"+port); !ok || !strings.HasPrefix(out, "hello from") {
		t.Fatalf("pypi.org by name: ok=%v %q", ok, out)
	}
	if out := mustSh(t, sb, "getent hosts other.org"); !strings.Contains(out, other.Addr.String()) {
		t.Fatalf("other.org does not resolve through the node: %q", out)
	}
	if out, ok := tcp(t, sb, "other.org:"+otherPort); ok {
		t.Fatalf("other.org reachable without a rule: %q", out)
	}
}
