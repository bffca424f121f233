package envstore_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// One embedded etcd member serves every test of the package (each under a
// key prefix of its own); TestMain stops it.
var (
	etcdOnce sync.Once
	etcdCli  *clientv3.Client
	etcdErr  error
	etcdStop func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	if etcdStop != nil {
		etcdStop()
	}
	os.Exit(code)
}

// testEtcd returns a client of the package's etcd member, started on first use.
func testEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	etcdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "envstore-etcd-")
		if err != nil {
			etcdErr = err
			return
		}
		port := func() string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				panic(err)
			}
			defer l.Close()
			return l.Addr().String()
		}
		cu, pu := "http://"+port(), "http://"+port()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- cluster.RunEtcd(ctx, cluster.EtcdConfig{Name: "t", DataDir: dir, ListenClient: cu, ListenPeer: pu},
				slog.New(slog.NewTextHandler(io.Discard, nil)))
		}()
		etcdStop = func() {
			if etcdCli != nil {
				etcdCli.Close()
			}
			cancel()
			<-done
			os.RemoveAll(dir)
		}
		testwait.Until(30*time.Second, func() bool {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			etcdCli, etcdErr = cluster.Connect(cctx, cluster.ClientConfig{Endpoints: cu})
			ccancel()
			return etcdErr == nil
		})
	})
	if etcdErr != nil {
		t.Fatalf("embedded etcd: %v", etcdErr)
	}
	return etcdCli
}
