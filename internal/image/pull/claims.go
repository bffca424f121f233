package pull

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// LayerClaims lets the nodes of a cluster that share one blob store fetch
// each OCI layer from a registry once (Puller.Claims): the first node to
// claim a layer fetches and converts it into the blob store and records the
// EROFS layer it made; the others wait for the record and use the blob
// already in the store. An image config is claimed the same way, by its
// digest: the node that fetches it stores it in the blob store as it is, and
// records a layer naming that blob.
type LayerClaims interface {
	// Claim returns the EROFS layer another node recorded for OCI layer dg,
	// if have says this node's blob store holds its blob (one it does not
	// hold is forgotten and claimed again). Otherwise it claims dg for this
	// node and returns done, which must be called with the layer made (nil:
	// it was not; another node may claim dg); done's error says the record
	// was not kept (the claim ends anyway). While another node holds the
	// claim, Claim waits until the claim ends.
	Claim(ctx context.Context, dg string, have func(image.Layer) bool) (el *image.Layer, done func(*image.Layer) error, err error)
}

// ClaimsPrefix is the etcd prefix of the claims of the nodes sharing blob
// store spec, under the cluster's prefix ("" = "/dsec/"): nodes with
// another store never wait for these.
func ClaimsPrefix(cluster, spec string) string {
	if cluster == "" {
		cluster = "/dsec/"
	}
	if !strings.HasSuffix(cluster, "/") {
		cluster += "/"
	}
	sum := sha256.Sum256([]byte(spec))
	return cluster + "layerclaims/" + hex.EncodeToString(sum[:8]) + "/"
}

// EtcdClaims keeps the claims in etcd, under Prefix (default "/dsec/";
// ClaimsPrefix scopes them to one blob store):
//
//	pulling/DIGEST  the node fetching OCI layer DIGEST, under a lease kept
//	                alive while it fetches (a node that dies loses it within
//	                TTL)
//	pulled/DIGEST   the EROFS layer made of it (image.Layer JSON)
type EtcdClaims struct {
	Client *clientv3.Client
	Prefix string
	Node   string
	// TTL is the claim's lease in seconds (0: 10).
	TTL int
}

var _ LayerClaims = (*EtcdClaims)(nil)

func (c *EtcdClaims) keys(dg string) (claim, done string) {
	p := c.Prefix
	if p == "" {
		p = "/dsec/"
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p + "pulling/" + dg, p + "pulled/" + dg
}

// claimsWriteTimeout bounds the record and release written after a fetch.
const claimsWriteTimeout = 10 * time.Second

func claimsErr(err error, what, dg string) error {
	return errdefs.Wrap(api.CodeUnavailable, err, "layer claims (etcd): %s %s", what, dg)
}

// Claim implements LayerClaims.
func (c *EtcdClaims) Claim(ctx context.Context, dg string, have func(image.Layer) bool) (*image.Layer, func(*image.Layer) error, error) {
	claimKey, doneKey := c.keys(dg)
	ttl := c.TTL
	if ttl <= 0 {
		ttl = 10
	}
	for {
		resp, err := c.Client.Get(ctx, doneKey)
		if err != nil {
			return nil, nil, claimsErr(err, "read", dg)
		}
		if len(resp.Kvs) == 1 {
			var el image.Layer
			if json.Unmarshal(resp.Kvs[0].Value, &el) == nil && el.Digest != "" && have(el) {
				return &el, nil, nil
			}
			// Its blob left the store (or the record is unreadable): fetch again.
			if _, err := c.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(doneKey), "=", resp.Kvs[0].ModRevision)).
				Then(clientv3.OpDelete(doneKey)).Commit(); err != nil {
				return nil, nil, claimsErr(err, "forget", dg)
			}
		}
		sess, err := concurrency.NewSession(c.Client, concurrency.WithTTL(ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
		if err != nil {
			return nil, nil, claimsErr(err, "lease for", dg)
		}
		tr, err := c.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(claimKey), "=", 0), clientv3.Compare(clientv3.CreateRevision(doneKey), "=", 0)).
			Then(clientv3.OpPut(claimKey, c.Node, clientv3.WithLease(sess.Lease()))).
			Else(clientv3.OpGet(claimKey)).Commit()
		if err != nil {
			sess.Close()
			return nil, nil, claimsErr(err, "claim", dg)
		}
		if tr.Succeeded {
			return nil, func(el *image.Layer) error { return c.release(doneKey, dg, el, sess) }, nil
		}
		sess.Close()
		if len(tr.Responses) == 1 && len(tr.Responses[0].GetResponseRange().Kvs) == 0 {
			continue // no claim: the record appeared meanwhile
		}
		if err := c.waitGone(ctx, claimKey, tr.Header.Revision); err != nil {
			return nil, nil, err
		}
	}
}

// release records el (if made) and then ends the claim.
func (c *EtcdClaims) release(doneKey, dg string, el *image.Layer, sess *concurrency.Session) error {
	defer sess.Close() // revokes the lease: the claim goes
	if el == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimsWriteTimeout)
	defer cancel()
	b, err := json.Marshal(el)
	if err != nil {
		return errdefs.Internal(err, "layer %s", dg)
	}
	if _, err := c.Client.Put(ctx, doneKey, string(b)); err != nil {
		// Not recorded: the others claim it in turn and fetch it themselves.
		return claimsErr(err, "record", dg)
	}
	return nil
}

// waitGone waits until key, present at revision rev, is deleted (its
// node released it or lost its lease).
func (c *EtcdClaims) waitGone(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range c.Client.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return claimsErr(err, "watch the claim of", key)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return claimsErr(context.Canceled, "watch the claim of", key)
}
