package e2b

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestEgressPolicy checks how create's allow_internet_access and network
// options become dsec's allow-list: internet access by default, false for
// loopback only, denyOut cut out of it, allowOut added back (allow wins),
// and what dsec cannot enforce refused with a message naming the field.
func TestEgressPolicy(t *testing.T) {
	yes, no := true, false
	list := func(s ...string) *[]string { return &s }
	allowed := func(pol *api.NetworkPolicy, addr string) bool {
		a := netip.MustParseAddr(addr)
		for _, s := range pol.Allow {
			if netip.MustParsePrefix(s).Contains(a) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name     string
		internet *bool
		net      *e2bapi.SandboxNetworkConfig
		reach    []string // must be allowed
		blocked  []string // must not be
		none     bool     // loopback only (nil policy)
	}{
		{name: "default is internet", reach: []string{"1.1.1.1", "198.18.3.2", "8.8.8.8"}},
		{name: "explicit true", internet: &yes, reach: []string{"1.1.1.1"}},
		{name: "false is loopback only", internet: &no, none: true},
		{name: "false with allowOut", internet: &no, net: &e2bapi.SandboxNetworkConfig{AllowOut: list("198.18.3.2", "10.1.0.0/16")},
			reach: []string{"198.18.3.2", "10.1.2.3"}, blocked: []string{"198.18.3.3", "1.1.1.1"}},
		{name: "deny all but one", net: &e2bapi.SandboxNetworkConfig{DenyOut: list("0.0.0.0/0"), AllowOut: list("1.1.1.1")},
			reach: []string{"1.1.1.1"}, blocked: []string{"8.8.8.8", "1.1.1.2"}},
		{name: "deny all", net: &e2bapi.SandboxNetworkConfig{DenyOut: list("0.0.0.0/0")}, none: true},
		{name: "deny one address", net: &e2bapi.SandboxNetworkConfig{DenyOut: list("8.8.8.8")},
			reach: []string{"1.1.1.1", "8.8.8.9", "8.8.8.7", "200.1.1.1"}, blocked: []string{"8.8.8.8"}},
		{name: "allow wins over deny", net: &e2bapi.SandboxNetworkConfig{DenyOut: list("0.0.0.0/0"), AllowOut: list("1.1.1.1", "8.8.8.8")},
			reach: []string{"1.1.1.1", "8.8.8.8"}, blocked: []string{"9.9.9.9"}},
		{name: "deny inside a private range opens no other", net: &e2bapi.SandboxNetworkConfig{DenyOut: list("10.1.0.0/16", "8.8.8.8")},
			reach: []string{"1.1.1.1"}, blocked: []string{"10.2.0.1", "10.1.0.1", "8.8.8.8"}},
		{name: "allowOut of a private address is honoured", net: &e2bapi.SandboxNetworkConfig{DenyOut: list("10.0.0.0/8"), AllowOut: list("10.1.2.3")},
			reach: []string{"1.1.1.1", "10.1.2.3"}, blocked: []string{"10.1.2.4"}},
		{name: "deny a range near this-network", net: &e2bapi.SandboxNetworkConfig{DenyOut: list("1.2.3.0/24", "127.0.0.1")},
			reach: []string{"1.2.4.1", "2.0.0.1"}, blocked: []string{"1.2.3.9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := egressPolicy(tc.internet, tc.net)
			if err != nil {
				t.Fatal(err)
			}
			if tc.none {
				if pol != nil {
					t.Fatalf("policy %v, want none (loopback only)", pol.Allow)
				}
				return
			}
			if pol == nil {
				t.Fatal("no policy, want egress")
			}
			// The node takes every entry as it is.
			if _, err := (netpolicy.RuleSets{}).Resolve(*pol); err != nil {
				t.Fatalf("the node refuses %v: %v", pol.Allow, err)
			}
			for _, a := range tc.reach {
				if !allowed(pol, a) {
					t.Errorf("%s not allowed by %v", a, pol.Allow)
				}
			}
			for _, a := range tc.blocked {
				if allowed(pol, a) {
					t.Errorf("%s allowed by %v", a, pol.Allow)
				}
			}
		})
	}
}

func TestEgressPolicyRefuses(t *testing.T) {
	list := func(s ...string) *[]string { return &s }
	host := "bad host/${PORT}"
	for _, tc := range []struct {
		net  e2bapi.SandboxNetworkConfig
		want string
	}{
		{e2bapi.SandboxNetworkConfig{AllowOut: list("pypi..org")}, "network.allowOut[0]"},
		{e2bapi.SandboxNetworkConfig{AllowOut: list("1.1.1.1", "a.*.example.com")}, "network.allowOut[1]"},
		{e2bapi.SandboxNetworkConfig{DenyOut: list("localhost")}, "network.denyOut[0]"},
		{e2bapi.SandboxNetworkConfig{AllowOut: list("999.1.1.1")}, "network.allowOut[0]"},
		{e2bapi.SandboxNetworkConfig{AllowOut: list("2001:db8::1")}, "want an IPv4 address or CIDR"},
		{e2bapi.SandboxNetworkConfig{DenyOut: list("not-an-address")}, "network.denyOut"},
		{e2bapi.SandboxNetworkConfig{EgressProxy: &e2bapi.SandboxEgressProxyConfig{Address: "p:1080"}}, "egressProxy"},
		{e2bapi.SandboxNetworkConfig{MaskRequestHost: &host}, "network.maskRequestHost"},
		{e2bapi.SandboxNetworkConfig{Rules: &map[string][]e2bapi.SandboxNetworkRule{"a.com": {{}}}}, "network.rules"},
	} {
		_, err := egressPolicy(nil, &tc.net)
		if err == nil || !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want invalid_argument naming %q", tc.net, err, tc.want)
		}
	}
}
