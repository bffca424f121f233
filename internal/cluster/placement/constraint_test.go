package placement

import (
	"reflect"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestParseConstraints(t *testing.T) {
	got, err := ParseConstraints(" zone = a ,pool=rl,zone=a, dsec.dev/gpu=h100")
	if err != nil {
		t.Fatal(err)
	}
	want := []Constraint{{"dsec.dev/gpu", "h100"}, {"pool", "rl"}, {"zone", "a"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
	if cs, err := ParseConstraints("  "); err != nil || cs != nil {
		t.Fatalf("empty: %v %v", cs, err)
	}
	for _, bad := range []string{"zone", "=a", "zone=a=b", "-x=1", "x y=1", "zone=a,", "a=1,a=2", "k=" + strings.Repeat("v", 64), strings.Repeat("k", 254) + "=1", "k=a/b"} {
		if _, err := ParseConstraints(bad); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("%q: want invalid_argument, got %v", bad, err)
		}
	}
}

func FuzzParseConstraints(f *testing.F) {
	for _, s := range []string{"zone=a", "a=1,b=2", "", " x = y ", "a=1,a=2", "k=", "dsec.dev/pool=rl-1", "=", ",,", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := ParseConstraints(s)
		if err != nil {
			if !errdefs.Is(err, api.CodeInvalidArgument) {
				t.Fatalf("%q: unclassified error %v", s, err)
			}
			return
		}
		// A parsed list formats and parses back to itself, sorted and unique.
		again, err := ParseConstraints(FormatConstraints(cs))
		if err != nil || !reflect.DeepEqual(again, cs) {
			t.Fatalf("%q → %v → %q → %v, %v", s, cs, FormatConstraints(cs), again, err)
		}
		for i, c := range cs {
			if strings.ContainsAny(c.Key+c.Value, "=, \t") || c.Key == "" {
				t.Fatalf("%q: bad constraint %q", s, c)
			}
			if i > 0 && cs[i-1].Key >= c.Key {
				t.Fatalf("%q: not sorted/unique: %v", s, cs)
			}
		}
	})
}
