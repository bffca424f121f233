package listpage

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestPageWalk: following next from page to page, in either order and with any
// limit, visits every match exactly once in order, with the right total,
// whatever the order of the input.
func TestPageWalk(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var list []api.Sandbox
	for _, i := range []int{7, 2, 9, 0, 4, 1, 8, 3, 6, 5, 10, 11} { // not in order
		list = append(list, api.Sandbox{ID: fmt.Sprintf("sb-%02d", i), CreatedAt: t0.Add(time.Duration(i/3) * time.Second),
			State: []string{api.StateRunning, api.StatePaused}[i%2]})
	}
	running := func(sb *api.Sandbox) bool { return sb.State == api.StateRunning }
	for _, desc := range []bool{false, true} {
		for _, limit := range []int{1, 2, 5, 6, 7} {
			var seen []string
			q := Query{Match: running, Desc: desc, Limit: limit}
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatalf("desc=%v limit=%d: no last page", desc, limit)
				}
				page, next, total := Page(list, q)
				if total != 6 || len(page) > limit {
					t.Fatalf("desc=%v limit=%d: page of %d, total %d", desc, limit, len(page), total)
				}
				for _, sb := range page {
					seen = append(seen, sb.ID)
				}
				if next.Zero() {
					break
				}
				if next != KeyOf(&page[len(page)-1]) {
					t.Fatalf("next %+v is not the page's last sandbox", next)
				}
				c, ok := Parse(next.String())
				if !ok || c != next {
					t.Fatalf("cursor %+v does not round-trip: %+v %v", next, c, ok)
				}
				q.After = c
			}
			want := "sb-00 sb-02 sb-04 sb-06 sb-08 sb-10"
			if desc {
				want = "sb-10 sb-08 sb-06 sb-04 sb-02 sb-00"
			}
			if got := strings.Join(seen, " "); got != want {
				t.Errorf("desc=%v limit=%d: walked %s, want %s", desc, limit, got, want)
			}
		}
	}
	if page, next, total := Page(list, Query{}); len(page) != len(list) || !next.Zero() || total != len(list) {
		t.Errorf("no paging: %d of %d, next %+v", len(page), total, next)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, s := range []string{"", "!", Cursor{Created: 1}.String(), "MTIz", "eDpzYg"} { // "123", "x:sb"
		if c, ok := Parse(s); ok {
			t.Errorf("Parse(%q) = %+v, want refused", s, c)
		}
	}
}
