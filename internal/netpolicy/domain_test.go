package netpolicy

import (
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestParseDomain(t *testing.T) {
	for in, want := range map[string]string{
		"pypi.org":            "pypi.org",
		"PyPI.org.":           "pypi.org",
		" *.Example.com ":     "*.example.com",
		"a-b.c_d.example.com": "a-b.c_d.example.com",
		"xn--bcher-kva.ch":    "xn--bcher-kva.ch",
	} {
		if got, err := ParseDomain("allow_domains[0]", in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"":                               "empty",
		"localhost":                      "fully qualified",
		"1.2.3.4":                        "IP address",
		"10.0.0.0/8":                     "IP address",
		"::1":                            "IP address",
		"1.2.3":                          "IP address",
		"pypi..org":                      "malformed label",
		"-a.example.com":                 "malformed label",
		"a.*.example.com":                "wildcard",
		"*example.com":                   "wildcard",
		"*.com.*":                        "wildcard",
		"exa mple.com":                   "malformed label",
		strings.Repeat("a", 64) + ".com": "malformed label",
	} {
		_, err := ParseDomain("allow_domains[3]", in)
		if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "allow_domains[3]") || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want invalid_argument naming allow_domains[3] and %q", in, err, why)
		}
	}
}

func TestDomainMatch(t *testing.T) {
	rules := []string{"pypi.org", "*.example.com"}
	for name, want := range map[string]bool{
		"pypi.org": true, "www.pypi.org": false, "notpypi.org": false,
		"a.example.com": true, "a.b.example.com": true, "example.com": false, "badexample.com": false,
	} {
		if got := domainMatch(rules, name); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

func TestResolveChecksDomains(t *testing.T) {
	_, err := RuleSets{}.Resolve(api.NetworkPolicy{AllowDomains: []string{"pypi.org"}, DenyDomains: []string{"ok.org", "8.8.8.8"}})
	if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "deny_domains[1]") {
		t.Fatalf("err %v, want invalid_argument naming deny_domains[1]", err)
	}
	many := make([]string, MaxDomains+1)
	for i := range many {
		many[i] = "a.org"
	}
	if _, err := (RuleSets{}).Resolve(api.NetworkPolicy{AllowDomains: many}); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Fatalf("%d names: %v, want invalid_argument", len(many), err)
	}
}
