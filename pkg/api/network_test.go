package api_test

import (
	"reflect"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestParseNetworkPolicy: the one-string form of a policy (dsec image build
// --network) reads back what String writes; none is no policy; a word that
// is no entry kind is refused.
func TestParseNetworkPolicy(t *testing.T) {
	for _, s := range []string{"", "none"} {
		if p, err := api.ParseNetworkPolicy(s); p != nil || err != nil {
			t.Fatalf("%q: %+v %v, want no policy", s, p, err)
		}
	}
	p, err := api.ParseNetworkPolicy("10.0.0.0/8:443, 198.18.1.2, rule:pypi,domain:*.pythonhosted.org,deny-domain:evil.example")
	if err != nil {
		t.Fatal(err)
	}
	want := &api.NetworkPolicy{Allow: []string{"10.0.0.0/8:443", "198.18.1.2"}, Rules: []string{"pypi"},
		AllowDomains: []string{"*.pythonhosted.org"}, DenyDomains: []string{"evil.example"}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("parsed %+v, want %+v", p, want)
	}
	if back, err := api.ParseNetworkPolicy(p.String()); err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip of %q: %+v %v", p.String(), back, err)
	}
	for _, bad := range []string{"pypi.org", "rules:x", "domain:"} {
		if _, err := api.ParseNetworkPolicy(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
