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
//
// Claims made at the same time go to etcd together (group commit): while up to
// claimPipeline transactions are in flight, new claims wait and the next
// transaction carries all of them (at most maxClaimBatch). Each claim is
// committed before Claim returns, exactly as when made alone.
type Requests struct {
	cli *clientv3.Client
	k   keys

	mu      sync.Mutex
	lease   clientv3.LeaseID
	granted time.Time

	qmu      sync.Mutex
	queue    []*pendingClaim
	flushers int
}

const (
	// maxClaimBatch bounds the claims of one transaction: etcd refuses a
	// transaction of more than --max-txn-ops (default 128) operations per branch.
	maxClaimBatch = 100
	// claimPipeline is how many claim transactions run at once.
	claimPipeline = 2
)

// pendingClaim is one Claim call waiting for its transaction.
type pendingClaim struct {
	ctx      context.Context
	id, node string
	done     chan claimResult // buffered (1)
}

type claimResult struct {
	holder string
	err    error
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
	c := &pendingClaim{ctx: ctx, id: id, node: node, done: make(chan claimResult, 1)}
	r.qmu.Lock()
	r.queue = append(r.queue, c)
	if r.flushers < claimPipeline {
		r.flushers++
		go r.flush()
	}
	r.qmu.Unlock()
	select {
	case res := <-c.done:
		return res.holder, res.err
	case <-ctx.Done():
		// The claim may still be committed; like a cancelled transaction, its
		// holder then is node, which never heard of the create.
		return "", fmt.Errorf("cluster: claim request %q: %w", id, ctx.Err())
	}
}

// flush commits queued claims, a batch at a time, until the queue is empty.
func (r *Requests) flush() {
	for {
		r.qmu.Lock()
		n := min(len(r.queue), maxClaimBatch)
		if n == 0 {
			r.flushers--
			r.qmu.Unlock()
			return
		}
		batch := r.queue[:n:n]
		r.queue = r.queue[n:]
		if len(r.queue) == 0 {
			r.queue = nil // let the backing array go
		}
		r.qmu.Unlock()
		r.commit(batch)
	}
}

// commit claims a batch: one transaction puts every key when none exists yet;
// otherwise the existing keys answer their claims and the rest try again.
func (r *Requests) commit(batch []*pendingClaim) {
	// Claims of one request ID in one batch share a key: the first claims it,
	// the others get its holder.
	first := make(map[string]int, len(batch))
	var keys []string
	var owners []*pendingClaim
	var dups [][]*pendingClaim
	for _, c := range batch {
		if c.ctx.Err() != nil {
			c.done <- claimResult{err: c.ctx.Err()}
			continue
		}
		key := r.k.request(c.id)
		if i, ok := first[key]; ok {
			dups[i] = append(dups[i], c)
			continue
		}
		first[key] = len(keys)
		keys = append(keys, key)
		owners = append(owners, c)
		dups = append(dups, nil)
	}
	answer := func(i int, res claimResult) {
		owners[i].done <- res
		for _, d := range dups[i] {
			d.done <- res
		}
	}
	// The transaction is not tied to one caller's context: it serves them all.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := r.leaseFor(ctx)
	if err != nil {
		for i := range owners {
			answer(i, claimResult{err: fmt.Errorf("cluster: request claim lease: %w", err)})
		}
		return
	}
	open := make([]int, len(keys))
	for i := range open {
		open[i] = i
	}
	fail := func(open []int, err error) {
		for _, i := range open {
			answer(i, claimResult{err: fmt.Errorf("cluster: claim request %q: %w", owners[i].id, err)})
		}
	}
	for round := 0; len(open) > 0; round++ {
		cmps := make([]clientv3.Cmp, len(open))
		puts := make([]clientv3.Op, len(open))
		for j, i := range open {
			cmps[j] = clientv3.Compare(clientv3.CreateRevision(keys[i]), "=", 0)
			puts[j] = clientv3.OpPut(keys[i], owners[i].node, clientv3.WithLease(lease))
		}
		// No Else branch reading the keys back: nearly every batch succeeds,
		// and the reads would make each transaction (its request, its raft
		// entry in the WAL) half as large again. A failed one reads them next.
		resp, err := r.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			fail(open, err)
			return
		}
		if resp.Succeeded {
			for _, i := range open {
				answer(i, claimResult{holder: owners[i].node})
			}
			return
		}
		// Some keys exist: they answer their claims; the others (expired or
		// absent by now) go again. Another API server may claim one of those
		// in between, so this may take a few rounds; after that one at a time.
		gets := make([]clientv3.Op, len(open))
		for j, i := range open {
			gets[j] = clientv3.OpGet(keys[i])
		}
		if resp, err = r.cli.Txn(ctx).Then(gets...).Commit(); err != nil {
			fail(open, err)
			return
		}
		var again []int
		for j, i := range open {
			kvs := resp.Responses[j].GetResponseRange().Kvs
			if len(kvs) > 0 {
				answer(i, claimResult{holder: string(kvs[0].Value)})
			} else {
				again = append(again, i)
			}
		}
		open = again
		if round >= 3 {
			for _, i := range open {
				h, err := r.claimOne(ctx, owners[i].id, owners[i].node)
				answer(i, claimResult{holder: h, err: err})
			}
			return
		}
	}
}

// claimOne claims one request ID in a transaction of its own.
func (r *Requests) claimOne(ctx context.Context, id, node string) (string, error) {
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
		return r.claimOne(ctx, id, node) // expired in between
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
		return r.claimOne(ctx, id, to)
	}
	return string(kvs[0].Value), nil
}

// Drop removes id's claim if node holds it (the create failed for good).
func (r *Requests) Drop(ctx context.Context, id, node string) {
	key := r.k.request(id)
	_, _ = r.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", node)).Then(clientv3.OpDelete(key)).Commit()
}
