package router

import (
	"context"

	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/pkg/api"
)

var _ project.RequestFinder = (*Router)(nil)

// FindRequests implements project.RequestFinder: each request ID's claim
// names the node that has (or had) its sandbox, and that node's list says
// whether it is alive. A retried create refused by its project's quota gets
// its sandbox back this way, without being placed. A request whose node is
// lost or gone is not found.
func (r *Router) FindRequests(ctx context.Context, ids []string) (map[string]api.Sandbox, error) {
	holders := make([]string, len(ids))
	errs := make([]error, len(ids))
	r.parallel(len(ids), func(i int) { holders[i], errs[i] = r.claimed(ctx, ids[i]) })
	want := map[string]map[string]bool{} // node → request IDs
	for i, id := range ids {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if holders[i] == "" {
			continue
		}
		if want[holders[i]] == nil {
			want[holders[i]] = map[string]bool{}
		}
		want[holders[i]][id] = true
	}
	out := make(map[string]api.Sandbox, len(ids))
	for node, reqs := range want {
		svc, err := r.nodeFor(node, "request IDs")
		if err != nil {
			continue
		}
		list, err := svc.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			if reqs[sb.RequestID] {
				out[sb.RequestID] = sb
			}
		}
	}
	return out, nil
}
