package cluster

import (
	"context"
	"fmt"
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

// Forget removes a lost node's records (and drain flag) from the registry; a
// live node is refused (conflict).
func (a Admin) Forget(ctx context.Context, node string) error {
	k := newKeys(a.Prefix)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := a.Client.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.live(node)), "=", 0)).
		Then(clientv3.OpDelete(k.known(node)), clientv3.OpDelete(k.drain(node))).
		Commit()
	if err != nil {
		return fmt.Errorf("cluster: forget %q: %w", node, err)
	}
	if !resp.Succeeded {
		return errdefs.Conflict("node %q is live; stop its agent first", node)
	}
	return nil
}
