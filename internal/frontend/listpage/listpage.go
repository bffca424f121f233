// Package listpage pages a sandbox listing for the front ends (/v1's
// GET /v1/sandboxes, E2B's GET /v2/sandboxes): sandboxes in a total order (by
// creation time, then ID), an opaque cursor that resumes after a sandbox, and a
// page of at most a limit. Each front end parses its own query and names its
// own errors; the order, the cursor and the cut are this package's.
package listpage

import (
	"encoding/base64"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/pkg/api"
)

// Cursor is a sandbox's position in the order: the sort key of the last
// sandbox of the previous page.
type Cursor struct {
	Created int64 // CreatedAt in Unix nanoseconds
	ID      string
}

// KeyOf is sb's position.
func KeyOf(sb *api.Sandbox) Cursor { return Cursor{Created: sb.CreatedAt.UnixNano(), ID: sb.ID} }

// Zero says the cursor is unset (the listing starts at its beginning).
func (c Cursor) Zero() bool { return c.ID == "" }

// String is the cursor's opaque wire form.
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.Created, 10) + ":" + c.ID))
}

// Parse reads a cursor String returned; ok is false for anything else.
func Parse(s string) (c Cursor, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, false
	}
	ts, id, found := strings.Cut(string(raw), ":")
	n, err := strconv.ParseInt(ts, 10, 64)
	if !found || err != nil || id == "" {
		return Cursor{}, false
	}
	return Cursor{Created: n, ID: id}, true
}

// Less orders positions by creation time, then ID.
func Less(a, b Cursor) bool {
	if a.Created != b.Created {
		return a.Created < b.Created
	}
	return a.ID < b.ID
}

// Query is what to cut from a listing.
type Query struct {
	// Match keeps a sandbox (nil: every one).
	Match func(*api.Sandbox) bool
	// Desc lists newest first.
	Desc bool
	// After resumes after this position (zero: from the start).
	After Cursor
	// Limit is the page's size (0: no paging, the whole listing).
	Limit int
}

// Page filters and orders list and cuts the page after the cursor; next is the
// position of the page's last sandbox when more follow (zero on the last page)
// and total counts every match. Only the page's sandboxes are copied; a list
// that is already in order (the agent's is) is not sorted again.
func Page(list []api.Sandbox, q Query) (page []api.Sandbox, next Cursor, total int) {
	type entry struct {
		key Cursor
		i   int
	}
	matched := make([]entry, 0, len(list))
	sorted := true
	for i := range list {
		if q.Match != nil && !q.Match(&list[i]) {
			continue
		}
		e := entry{key: KeyOf(&list[i]), i: i}
		if n := len(matched); n > 0 && !Less(matched[n-1].key, e.key) {
			sorted = false
		}
		matched = append(matched, e)
	}
	if !sorted {
		sort.Slice(matched, func(a, b int) bool { return Less(matched[a].key, matched[b].key) })
	}
	if q.Desc {
		slices.Reverse(matched)
	}
	total = len(matched)
	start := 0
	if !q.After.Zero() {
		start = sort.Search(len(matched), func(i int) bool {
			if q.Desc {
				return Less(matched[i].key, q.After)
			}
			return Less(q.After, matched[i].key)
		})
	}
	matched = matched[start:]
	if q.Limit > 0 && len(matched) > q.Limit {
		matched = matched[:q.Limit]
		next = matched[len(matched)-1].key
	}
	page = make([]api.Sandbox, len(matched))
	for j, e := range matched {
		page[j] = list[e.i]
	}
	return page, next, total
}
