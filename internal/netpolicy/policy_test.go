package netpolicy

import (
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestParseEntry(t *testing.T) {
	good := map[string]string{
		"10.1.2.3":            "10.1.2.3",
		"10.1.2.3/32":         "10.1.2.3",
		"10.1.2.0/24":         "10.1.2.0/24",
		"10.1.2.3:443":        "10.1.2.3:443",
		"0.0.0.0/0:53":        "0.0.0.0/0:53",
		"10.0.0.0/8:1-65535":  "10.0.0.0/8:1-65535",
		"192.0.2.7:8000-8000": "192.0.2.7:8000",
	}
	for in, want := range good {
		e, err := ParseEntry(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if e.String() != want {
			t.Errorf("%q → %q, want %q", in, e.String(), want)
		}
	}
	bad := map[string]string{
		"":                 "empty",
		"10.1.2.3/33":      "malformed CIDR",
		"10.1.2.3/24":      "host bits set (did you mean 10.1.2.0/24?)",
		"10.1.2":           "malformed address",
		"010.1.2.3":        "malformed address",
		"10.1.2.3:0":       "out of range",
		"10.1.2.3:65536":   "out of range",
		"10.1.2.3:99999":   "out of range",
		"10.1.2.3:80-70":   "empty (low > high)",
		"10.1.2.3:80-":     "malformed port",
		"10.1.2.3:-80":     "malformed port",
		"10.1.2.3:080":     "malformed port",
		"10.1.2.3:+80":     "malformed port",
		"10.1.2.3:1-2-3":   "malformed port",
		"fd00::1":          "only IPv4",
		"::ffff:10.1.2.3":  "only IPv4",
		"[fd00::1]:80":     "only IPv4",
		"127.0.0.1:8080":   "loopback",
		"127.0.0.0/8":      "loopback",
		"169.254.169.254":  "link-local",
		"224.0.0.1":        "multicast",
		"10.1.2.3 :80":     "white space",
		"example.com:443":  "malformed address",
		"10.1.2.3/24:80":   "host bits",
		"10.1.2.3%eth0:80": "malformed address",
	}
	for in, want := range bad {
		_, err := ParseEntry(in)
		if err == nil {
			t.Errorf("%q: accepted", in)
			continue
		}
		if errdefs.CodeOf(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v (code %s), want invalid_argument mentioning %q", in, err, errdefs.CodeOf(err), want)
		}
	}
}

func TestRuleSets(t *testing.T) {
	rs := RuleSets{}
	if err := rs.Add("pypi=10.1.2.3:443,10.1.2.4:443"); err != nil {
		t.Fatal(err)
	}
	if err := rs.Add("dns=10.9.9.9:53"); err != nil {
		t.Fatal(err)
	}
	for _, def := range []string{"pypi=10.0.0.1", "Bad=10.0.0.1", "x", "x=", "x=10.0.0.1,,10.0.0.2", "x=10.0.0.1:0"} {
		if err := rs.Add(def); errdefs.CodeOf(err) != api.CodeInvalidArgument {
			t.Errorf("%q: %v", def, err)
		}
	}
	es, err := rs.Resolve(api.NetworkPolicy{Allow: []string{"10.1.2.3:443", "10.5.0.0/16"}, Rules: []string{"pypi", "dns", "pypi"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(entryStrings(es), " "); got != "10.1.2.3:443 10.5.0.0/16 10.1.2.4:443 10.9.9.9:53" {
		t.Fatalf("resolved %q", got)
	}
	_, err = rs.Resolve(api.NetworkPolicy{Rules: []string{"pipy"}})
	if err == nil || !strings.Contains(err.Error(), `unknown rule "pipy" (defined: dns, pypi)`) {
		t.Fatalf("unknown rule: %v", err)
	}
	many := api.NetworkPolicy{}
	for i := 0; i <= MaxAllow; i++ {
		many.Allow = append(many.Allow, "10.0.0.1")
	}
	if _, err := rs.Resolve(many); errdefs.CodeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("too many entries: %v", err)
	}
}

// FuzzParseEntry: any input either parses into an entry that prints back to
// something that parses to the same entry, or is refused as invalid_argument;
// it never panics and never yields a port 0 with a range, or a reserved range.
func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"10.1.2.3", "10.1.2.0/24:80-90", "0.0.0.0/0", "1.2.3.4:65535", "fd00::/8", "1.2.3.4:1-", "127.0.0.1", "1.2.3.4/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEntry(s)
		if err != nil {
			if errdefs.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("%q: error %v is not invalid_argument", s, err)
			}
			return
		}
		if !e.Prefix.Addr().Is4() || e.Prefix.Masked() != e.Prefix {
			t.Fatalf("%q: bad prefix %v", s, e.Prefix)
		}
		if (e.PortLo == 0) != (e.PortHi == 0) || e.PortLo > e.PortHi {
			t.Fatalf("%q: bad ports %d-%d", s, e.PortLo, e.PortHi)
		}
		for _, r := range reserved {
			if r.prefix.Bits() <= e.Prefix.Bits() && r.prefix.Contains(e.Prefix.Addr()) {
				t.Fatalf("%q: reserved destination %v accepted", s, e.Prefix)
			}
		}
		again, err := ParseEntry(e.String())
		if err != nil || again != e {
			t.Fatalf("%q → %q → %v, %v", s, e.String(), again, err)
		}
	})
}

// FuzzRuleSetsAdd: an operator's definition either adds a named, non-empty
// set or is refused; a refused definition changes nothing.
func FuzzRuleSetsAdd(f *testing.F) {
	f.Add("pypi=10.1.2.3:443,10.1.2.4:443")
	f.Add("a=1.2.3.4,")
	f.Add("=1.2.3.4")
	f.Fuzz(func(t *testing.T, def string) {
		rs := RuleSets{}
		if err := rs.Add(def); err != nil {
			if len(rs) != 0 || errdefs.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("%q: %v, sets %v", def, err, rs)
			}
			return
		}
		if len(rs) != 1 {
			t.Fatalf("%q: %d sets", def, len(rs))
		}
		for _, es := range rs {
			if len(es) == 0 {
				t.Fatalf("%q: empty set", def)
			}
		}
	})
}
