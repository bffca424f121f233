package session

import (
	"net/url"
	"strings"
	"testing"
)

func TestNewIDNamesItsNode(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewID("gpu-07")
		if node, ok := NodeOf(id); !ok || node != "gpu-07" {
			t.Fatalf("NodeOf(%q) = %q, %v", id, node, ok)
		}
		if url.PathEscape(id) != id || strings.ContainsAny(id, "/\\ ") || len(id) > 63 {
			t.Fatalf("%q is not path- and host-name-safe", id)
		}
		if seen[id] {
			t.Fatalf("duplicate %q", id)
		}
		seen[id] = true
	}
	if long := NewID(strings.Repeat("n", MaxNodeName)); len(long) > 63 {
		t.Fatalf("%q is longer than a host name may be", long)
	}
}

func TestNodeOf(t *testing.T) {
	for id, want := range map[string]string{
		"sb-0123456789abcdef.node-a": "node-a",
		"sb-0123456789abcdef.a":      "a",
		"sb-0123456789abcdef":        "", // old form: no node
		"sb-1":                       "",
		"sb-0123456789abcdef.":       "",
		"sb-0123456789abcdef.Node":   "",
		"sb-0123456789abcdef.a.b":    "",
		"sb-0123456789abcdef.-a":     "",
		"x-0123456789abcdef.node":    "",
		"":                           "",
		"sb-x.../etc":                "",
	} {
		got, ok := NodeOf(id)
		if got != want || ok != (want != "") {
			t.Errorf("NodeOf(%q) = %q, %v; want %q", id, got, ok, want)
		}
	}
}

func TestNodeNames(t *testing.T) {
	for host, want := range map[string]string{
		"gpu-07":                       "gpu-07",
		"GPU07.cluster.example.com":    "gpu07",
		"my_host":                      "my-host",
		"-x-":                          "x",
		"":                             "node",
		"___":                          "node",
		strings.Repeat("a", 40):        strings.Repeat("a", MaxNodeName),
		strings.Repeat("a", 23) + "-b": strings.Repeat("a", 23),
	} {
		got := NodeNameFrom(host)
		if got != want {
			t.Errorf("NodeNameFrom(%q) = %q, want %q", host, got, want)
		}
		if err := CheckNodeName(got); err != nil {
			t.Errorf("NodeNameFrom(%q) = %q is not valid: %v", host, got, err)
		}
	}
	for _, bad := range []string{"", "A", "a.b", "a/b", "-a", "a-", "a b", strings.Repeat("a", MaxNodeName+1)} {
		if CheckNodeName(bad) == nil {
			t.Errorf("CheckNodeName(%q) accepted", bad)
		}
	}
}

func FuzzNodeOf(f *testing.F) {
	f.Add("sb-0123456789abcdef.node-a")
	f.Add("sb-0123456789abcdef")
	f.Fuzz(func(t *testing.T, id string) {
		node, ok := NodeOf(id)
		if ok && (CheckNodeName(node) != nil || !strings.HasSuffix(id, "."+node)) {
			t.Fatalf("NodeOf(%q) = %q", id, node)
		}
		if n := NodeNameFrom(id); CheckNodeName(n) != nil {
			t.Fatalf("NodeNameFrom(%q) = %q is invalid", id, n)
		}
	})
}
