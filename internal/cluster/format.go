package cluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/datafmt"
)

func (k keys) format() string { return k.prefix + "format" }

// CheckFormat checks the cluster's key layout version (datafmt.Cluster) before
// anything is registered: the first agent or API server stores it (a cluster
// without one is of format 1), every later one compares; a layout of a later
// dsec is refused (datafmt.ErrNewer), and nothing is written.
func CheckFormat(ctx context.Context, cli *clientv3.Client, prefix string) error {
	key := newKeys(prefix).format()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, strconv.Itoa(datafmt.Cluster))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("cluster: check the key layout version: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil
	}
	have, err := strconv.Atoi(string(kvs[0].Value))
	if err != nil {
		return fmt.Errorf("cluster: key %s holds %q, not a format number", key, kvs[0].Value)
	}
	if have > datafmt.Cluster {
		return fmt.Errorf("cluster: %w", datafmt.Newer("the cluster's keys under "+newKeys(prefix).prefix, have, datafmt.Cluster))
	}
	return nil
}
