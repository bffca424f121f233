package e2b

import (
	"net/url"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/frontend/listpage"
)

// FuzzListQuery: any query string of GET /v2/sandboxes parses or is refused
// with an invalid_argument error, never a panic.
func FuzzListQuery(f *testing.F) {
	for _, s := range []string{"", "state=running,paused", "metadata=a%3Db%26c%3Dd", "limit=5&nextToken=MTIzOnNi", "order=asc&startedAfter=2020-01-01T00:00:00Z", "metadata=%25zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := url.ParseQuery(s)
		if err != nil {
			return
		}
		lq, err := parseListQuery(q, false)
		if err != nil {
			return
		}
		if lq.limit < 1 || lq.limit > maxListLimit || len(lq.states) == 0 {
			t.Fatalf("accepted %q with limit %d states %v", s, lq.limit, lq.states)
		}
		if !lq.after.Zero() {
			if c, ok := listpage.Parse(lq.after.String()); !ok || c != lq.after {
				t.Fatalf("cursor %+v does not round-trip", lq.after)
			}
		}
	})
}

// FuzzResolvePath: every accepted path is absolute and clean.
func FuzzResolvePath(f *testing.F) {
	f.Add("0", "\x00")
	f.Add("x", "../..")
	for _, s := range []string{"/etc/passwd", "rel", "~/x", "~", "../../..", "/a/../../b", "a\x00b"} {
		f.Add(s, "root")
		f.Add(s, "user")
	}
	f.Fuzz(func(t *testing.T, p, user string) {
		got, err := resolvePath(p, user)
		if err != nil {
			return
		}
		if !strings.HasPrefix(got, "/") || strings.Contains(got, "/../") || strings.HasSuffix(got, "/..") || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("resolvePath(%q, %q) = %q", p, user, got)
		}
	})
}

// FuzzMetadataQuery: parsing never panics and an accepted filter re-encodes to
// one that parses to the same pairs.
func FuzzMetadataQuery(f *testing.F) {
	for _, s := range []string{"a=b", "a%3D=b%26", "x", "%zz=1", "a=1&a=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		md, err := parseMetadataQuery(s)
		if err != nil || len(md) == 0 {
			return
		}
		q := url.Values{}
		for k, v := range md {
			q.Set(url.QueryEscape(k), url.QueryEscape(v))
		}
		back, err := parseMetadataQuery(q.Encode())
		if err != nil || len(back) != len(md) {
			t.Fatalf("%q -> %v -> %q -> %v %v", s, md, q.Encode(), back, err)
		}
		for k, v := range md {
			if back[k] != v {
				t.Fatalf("%q: %q=%q came back as %q", s, k, v, back[k])
			}
		}
	})
}
