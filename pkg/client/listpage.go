package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/pkg/api"
)

// ListOptions filters and pages GET /v1/sandboxes. The zero value lists every
// sandbox, oldest first.
type ListOptions struct {
	// States, Backends and Nodes match any of their values (empty: all).
	States, Backends, Nodes []string
	// Labels must all match: "KEY" (set, any value) or "KEY=VALUE".
	Labels []string
	// Limit is the page size (1 to 1000; 0: no paging); Cursor the previous
	// page's NextCursor.
	Limit  int
	Cursor string
	// Newest lists newest first.
	Newest bool
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	for name, vals := range map[string][]string{"state": o.States, "backend": o.Backends, "node": o.Nodes} {
		if len(vals) > 0 {
			q.Set(name, strings.Join(vals, ","))
		}
	}
	for _, l := range o.Labels {
		q.Add("label", l)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Newest {
		q.Set("order", "desc")
	}
	return q
}

// ListPage lists the sandboxes matching o: one page with o.Limit (then
// NextCursor and Total are set), else every match.
func (c *Client) ListPage(ctx context.Context, o ListOptions) (api.ListSandboxesResponse, error) {
	var out api.ListSandboxesResponse
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/sandboxes", query: o.query(), retry: true}, &out)
	return out, err
}
