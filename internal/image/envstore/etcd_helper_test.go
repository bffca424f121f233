package envstore_test

import (
	"os"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/cluster/etcdtest"
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
		var stop func()
		etcdCli, stop, etcdErr = etcdtest.Run(dir)
		etcdStop = func() {
			if stop != nil {
				stop()
			}
			os.RemoveAll(dir)
		}
	})
	if etcdErr != nil {
		t.Fatalf("embedded etcd: %v", etcdErr)
	}
	return etcdCli
}
