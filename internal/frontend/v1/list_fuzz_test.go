package v1

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/listpage"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FuzzListQuery: any query string of GET /v1/sandboxes is either refused with
// invalid_argument or gives a page that holds only matches, at most limit of
// them, in order, and a next cursor that parses and resumes after the page.
func FuzzListQuery(f *testing.F) {
	for _, s := range []string{"", "state=running", "backend=container,microvm&label=a=b", "limit=3&order=desc",
		"label=team&node=n1&limit=1", "cursor=MTIzOnNiLTE", "state=", "limit=1001", "%zz", "label=%3D"} {
		f.Add(s)
	}
	t0 := time.Unix(1000, 0)
	var list []api.Sandbox
	for i := range 12 {
		list = append(list, api.Sandbox{ID: fmt.Sprintf("sb-%016x.n%d", i, i%2), State: knownStates[i%3],
			Backend: knownBackends[i%2], CreatedAt: t0.Add(time.Duration(i/3) * time.Second),
			Labels: map[string]string{"team": fmt.Sprint(i % 3), "a": "b"}})
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
		r.URL.RawQuery = raw
		q, err := parseListQuery(r, knownBackends)
		if err != nil {
			if !errdefs.Is(err, api.CodeInvalidArgument) {
				t.Fatalf("%q: %v is not invalid_argument", raw, err)
			}
			return
		}
		page, next, total := q.page(list)
		if q.limit > 0 && len(page) > q.limit {
			t.Fatalf("%q: %d items over limit %d", raw, len(page), q.limit)
		}
		if len(page) > total {
			t.Fatalf("%q: page %d > total %d", raw, len(page), total)
		}
		for i := range page {
			if !q.match(&page[i]) {
				t.Fatalf("%q: %s does not match", raw, page[i].ID)
			}
			if i > 0 {
				a, b := listpage.KeyOf(&page[i-1]), listpage.KeyOf(&page[i])
				if (q.desc && !listpage.Less(b, a)) || (!q.desc && !listpage.Less(a, b)) {
					t.Fatalf("%q: out of order at %d", raw, i)
				}
			}
		}
		if next != "" {
			c, err := parseCursor(next)
			if err != nil || c != listpage.KeyOf(&page[len(page)-1]) {
				t.Fatalf("%q: next cursor %q: %v", raw, next, err)
			}
			vals, _ := url.ParseQuery(raw)
			vals.Set("cursor", next)
			r2 := httptest.NewRequest("GET", "/v1/sandboxes", nil)
			r2.URL.RawQuery = vals.Encode()
			if q2, err := parseListQuery(r2, knownBackends); err == nil {
				rest, _, _ := q2.page(list)
				for _, sb := range rest {
					for _, p := range page {
						if sb.ID == p.ID {
							t.Fatalf("%q: %s on two pages", raw, sb.ID)
						}
					}
				}
			}
		}
	})
}
