package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RequestTTL is how long a create's request ID stays claimed: a retry within it
// goes to the node that has (or is creating) the sandbox.
const RequestTTL = 24 * time.Hour

// Requests maps create request IDs to the node placed for them, so a create
// retried through any API server reaches the same node, which deduplicates it.
type Requests struct {
	cli *clientv3.Client
	k   keys

	mu      sync.Mutex
	lease   clientv3.LeaseID
	granted time.Time
}

// NewRequests returns the request-ID claims under prefix.
func NewRequests(cli *clientv3.Client, prefix string) *Requests {
	return &Requests{cli: cli, k: newKeys(prefix)}
}

// leaseFor returns a lease the claims of the next hour go under (each lives
// between RequestTTL-1h and RequestTTL).
func (r *Requests) leaseFor(ctx context.Context) (clientv3.LeaseID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lease != 0 && time.Since(r.granted) < time.Hour {
		return r.lease, nil
	}
	g, err := r.cli.Grant(ctx, int64(RequestTTL/time.Second))
	if err != nil {
		return 0, err
	}
	r.lease, r.granted = g.ID, time.Now()
	return g.ID, nil
}

// Lookup returns the node holding request id's claim, if any. It reads the
// local etcd member (serializable), so it may miss a claim made a moment ago;
// Claim is the authority.
func (r *Requests) Lookup(ctx context.Context, id string) (string, bool, error) {
	resp, err := r.cli.Get(ctx, r.k.request(id), clientv3.WithSerializable())
	if err != nil {
		return "", false, fmt.Errorf("cluster: look up request %q: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// Claim records node for request id unless id is claimed already; it returns
// the node that holds the claim (node itself when this call made it).
func (r *Requests) Claim(ctx context.Context, id, node string) (string, error) {
	lease, err := r.leaseFor(ctx)
	if err != nil {
		return "", fmt.Errorf("cluster: request claim lease: %w", err)
	}
	key := r.k.request(id)
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, node, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", fmt.Errorf("cluster: claim request %q: %w", id, err)
	}
	if resp.Succeeded {
		return node, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return r.Claim(ctx, id, node) // expired in between
	}
	return string(kvs[0].Value), nil
}

// Move changes id's claim from node from to node to (after from rejected the
// create); it returns the claim's holder afterwards.
func (r *Requests) Move(ctx context.Context, id, from, to string) (string, error) {
	lease, err := r.leaseFor(ctx)
	if err != nil {
		return "", err
	}
	key := r.k.request(id)
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", from)).
		Then(clientv3.OpPut(key, to, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", fmt.Errorf("cluster: move request %q: %w", id, err)
	}
	if resp.Succeeded {
		return to, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return r.Claim(ctx, id, to)
	}
	return string(kvs[0].Value), nil
}

// Drop removes id's claim if node holds it (the create failed for good).
func (r *Requests) Drop(ctx context.Context, id, node string) {
	key := r.k.request(id)
	_, _ = r.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", node)).Then(clientv3.OpDelete(key)).Commit()
}
