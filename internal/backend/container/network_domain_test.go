package container_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestDomainRuleInRealSandbox: a real sandbox allowed only pypi.org resolves
// it with its image's own resolv.conf (a resolver it cannot reach: the node
// answers) through a resolver the test runs, and connects by name; the
// address is refused before it was resolved, and another name's address
// stays refused after it was. An HTTP request to pypi.org's address gets
// through with Host pypi.org and is reset with Host evil.org, a name the
// same address serves that the sandbox is not allowed (the node's host
// check).
func TestDomainRuleInRealSandbox(t *testing.T) {
	lower := requireImage(t, "debian")
	resolver := netpolicytest.NewHost(t, "dstc", 65)
	pypi := netpolicytest.NewHost(t, "dstc", 66)
	other := netpolicytest.NewHost(t, "dstc", 67)
	netpolicytest.DNSServer(t, resolver.NS, "198.18.65.2:53", 60, map[string]netip.Addr{
		"pypi.org": pypi.Addr, "other.org": other.Addr, "evil.org": pypi.Addr})
	pypi.WebServer(t)
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
	if out, ok := httpGet(t, sb, "pypi.org", "pypi.org"); !ok || !strings.Contains(out, "host=pypi.org") {
		t.Fatalf("GET http://pypi.org/: ok=%v %q", ok, out)
	}
	if out, ok := httpGet(t, sb, "pypi.org", "evil.org"); ok || strings.Contains(out, "host=") {
		t.Fatalf("GET with Host evil.org to pypi.org's address: ok=%v %q, want reset", ok, out)
	}
}

// httpGet sends a GET with Host header host to port 80 of addr from inside
// the sandbox (bash's /dev/tcp) and returns the answer, or bash's error.
func httpGet(t *testing.T, inst driver.Instance, addr, host string) (string, bool) {
	t.Helper()
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/80 && printf 'GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' >&3 && timeout 3 cat <&3`, addr, host)
	out, errOut, ok := bash5(t, inst, script)
	return out + errOut, ok
}
