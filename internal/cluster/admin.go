package cluster

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Admin changes operator state in the registry.
type Admin struct {
	Client *clientv3.Client
	Prefix string
}

// SetDrain sets or clears node's drain flag: a draining node keeps its
// sandboxes and takes no new ones. An unknown node is not_found.
func (a Admin) SetDrain(ctx context.Context, node string, drain bool) error {
	k := newKeys(a.Prefix)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := a.Client.Get(cctx, k.known(node), clientv3.WithCountOnly())
	if err != nil {
		return errdefs.Wrap(api.CodeUnavailable, err, "cluster: look up node %q", node)
	}
	if resp.Count == 0 {
		return errdefs.NotFound("node %q is not in the cluster", node)
	}
	if drain {
		_, err = a.Client.Put(cctx, k.drain(node), time.Now().UTC().Format(time.RFC3339))
	} else {
		_, err = a.Client.Delete(cctx, k.drain(node))
	}
	if err != nil {
		return errdefs.Wrap(api.CodeUnavailable, err, "cluster: drain %q", node)
	}
	return nil
}

// CheckForgettable answers nil for a lost node, conflict for a live one and
// not_found for one the registry does not know.
func (a Admin) CheckForgettable(ctx context.Context, node string) error {
	k := newKeys(a.Prefix)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := a.Client.Txn(cctx).Then(clientv3.OpGet(k.live(node), clientv3.WithCountOnly()),
		clientv3.OpGet(k.known(node), clientv3.WithCountOnly())).Commit()
	if err != nil {
		return errdefs.Wrap(api.CodeUnavailable, err, "cluster: look up node %q", node)
	}
	return forgettable(node, resp.Responses[0].GetResponseRange().Count > 0, resp.Responses[1].GetResponseRange().Count > 0)
}

func forgettable(node string, live, known bool) error {
	switch {
	case live:
		return errdefs.Conflict("node %q is live (its agent holds its lease); stop its agent, wait until `dsec nodes` shows it lost, then remove it", node)
	case !known:
		return errdefs.NotFound("node %q is not in the cluster", node)
	}
	return nil
}

// Forget removes a lost node's records (and drain flag) from the registry; a
// live node is refused (conflict), an unknown one is not_found.
func (a Admin) Forget(ctx context.Context, node string) error {
	k := newKeys(a.Prefix)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := a.Client.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.live(node)), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(k.known(node)), ">", 0)).
		Then(clientv3.OpDelete(k.known(node)), clientv3.OpDelete(k.drain(node))).
		Else(clientv3.OpGet(k.live(node), clientv3.WithCountOnly()), clientv3.OpGet(k.known(node), clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return errdefs.Wrap(api.CodeUnavailable, err, "cluster: forget node %q", node)
	}
	if !resp.Succeeded {
		return forgettable(node, resp.Responses[0].GetResponseRange().Count > 0, resp.Responses[1].GetResponseRange().Count > 0)
	}
	return nil
}

// ForgetClaims deletes the request-ID claims held by node (a removed node's:
// a retry of such a create is placed afresh instead of sent to a node that is
// gone) and returns how many. Each delete is conditional on the claim being
// unchanged since the scan.
func (a Admin) ForgetClaims(ctx context.Context, node string) (int, error) {
	k := newKeys(a.Prefix)
	base := k.prefix + "req/"
	end := clientv3.GetPrefixRangeEnd(base)
	from, n := base, 0
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := a.Client.Get(cctx, from, clientv3.WithRange(end), clientv3.WithLimit(1000))
		cancel()
		if err != nil {
			return n, errdefs.Wrap(api.CodeUnavailable, err, "cluster: list request claims")
		}
		for _, kv := range r.Kvs {
			if string(kv.Value) != node {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t, err := a.Client.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
				Then(clientv3.OpDelete(string(kv.Key))).Commit()
			cancel()
			if err != nil {
				return n, errdefs.Wrap(api.CodeUnavailable, err, "cluster: delete a request claim")
			}
			if t.Succeeded {
				n++
			}
		}
		if !r.More || len(r.Kvs) == 0 {
			return n, nil
		}
		from = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}
