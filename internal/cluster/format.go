package cluster

import (
	"context"
	"fmt"
	"strconv"

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
	have, stored, err := putIfAbsent(ctx, cli, key, strconv.Itoa(datafmt.Cluster))
	if err != nil {
		return fmt.Errorf("cluster: check the key layout version: %w", err)
	}
	if stored || have == nil {
		return nil
	}
	if err := datafmt.CheckNumber("the cluster's keys under "+newKeys(prefix).prefix, have, datafmt.Cluster); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}
