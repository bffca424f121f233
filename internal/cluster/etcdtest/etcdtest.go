// Package etcdtest starts a one-member etcd in the test's process, for tests
// of state kept in a cluster's store.
package etcdtest

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// Run starts a one-member etcd keeping its data in dir, on loopback ports,
// and returns a client of it; stop closes the client and ends the member.
func Run(dir string) (cli *clientv3.Client, stop func(), err error) {
	port := func() (string, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		defer l.Close()
		return l.Addr().String(), nil
	}
	cu, err := port()
	if err != nil {
		return nil, nil, err
	}
	pu, err := port()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cluster.RunEtcd(ctx, cluster.EtcdConfig{Name: "t", DataDir: dir, ListenClient: "http://" + cu, ListenPeer: "http://" + pu},
			slog.New(slog.DiscardHandler))
	}()
	stop = func() {
		if cli != nil {
			cli.Close()
		}
		cancel()
		<-done
	}
	testwait.Until(30*time.Second, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		cli, err = cluster.Connect(cctx, cluster.ClientConfig{Endpoints: "http://" + cu})
		return err == nil
	})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return cli, stop, nil
}

// Start runs a one-member etcd until the test ends and returns a client of it.
func Start(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, stop, err := Run(t.TempDir())
	if err != nil {
		t.Fatalf("embedded etcd did not start: %v", err)
	}
	t.Cleanup(stop)
	return cli
}
