package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// testEtcd starts a one-member etcd in this process and returns a client.
func testEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	port := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	cu, pu := "http://"+port(), "http://"+port()
	c := EtcdConfig{Name: "t", DataDir: cfg.Dir, ListenClient: cu, ListenPeer: pu}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunEtcd(ctx, c, quiet()) }()
	t.Cleanup(func() { cancel(); <-done })
	var cli *clientv3.Client
	var err error
	connected := testwait.Until(20*time.Second, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		cli, err = Connect(cctx, ClientConfig{Endpoints: cu})
		ccancel()
		return err == nil
	})
	if !connected {
		t.Fatalf("etcd did not start: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func mustSecret(t testing.TB, s string) Secret {
	t.Helper()
	sec, err := NewSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

func eventually(t *testing.T, d time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	if !testwait.Until(d, func() bool { err = f(); return err == nil }) {
		t.Fatalf("%s: not within %s: %v", what, d, err)
	}
	return time.Since(start)
}

func record(name string) func(context.Context) (NodeRecord, error) {
	return func(context.Context) (NodeRecord, error) {
		return NodeRecord{Name: name, Addr: "http://" + name + ":1", Backends: []string{"container"}}, nil
	}
}

func state(w *Watcher, name string) string {
	s, ok := w.Node(name)
	if !ok {
		return "unknown"
	}
	return string(s.State)
}

func want(w *Watcher, name, st string) func() error {
	return func() error {
		if got := state(w, name); got != st {
			return fmt.Errorf("%s is %s, want %s", name, got, st)
		}
		return nil
	}
}

func clientv3WithPrefix() clientv3.OpOption { return clientv3.WithPrefix() }
