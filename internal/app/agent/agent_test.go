package agent_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/app/agent"
	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/image/lazy"
	"github.com/dsec-dev/dsec/internal/reclaim/damontest"
	"github.com/dsec-dev/dsec/internal/testwait"
)

func TestMain(m *testing.M) {
	lazy.MaybeMain() // the nodes these tests open start this binary as layerd
	os.Exit(m.Run())
}

// TestPartialStartReleasesEverything fails `dsec agent`'s start-up right
// after each of its steps in turn and checks that the failed start left
// nothing: the node's swap, kdamond, table, mounts and processes (as the node
// test checks), its listeners, and its record in etcd. Then a start that
// succeeds registers the node and its stop withdraws it.
func TestPartialStartReleasesEverything(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	eps, cli := apptest.Etcd(t)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	damon := damontest.New(t, 0)
	addrs := apptest.FreePorts(t, 2)
	var logs bytes.Buffer
	cfg := agent.Config{
		Node: node.Config{DataDir: dataDir, NodeName: "partial", Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			QoS: node.QoSConfig{ZramBytes: 16 << 20, IdleReclaimAfter: time.Minute, DAMONRoot: damon.Root, DAMONFS: damon}},
		Etcd:   cluster.ClientConfig{Endpoints: eps},
		Listen: addrs[0], MetricsListen: addrs[1], SecretFile: secretFile, TTL: 2 * time.Second,
		ShutdownTimeout: 10 * time.Second,
	}
	before := apptest.Snapshot(t, dataDir, damon)
	check := func(when string) {
		t.Helper()
		apptest.Clean(t, when, before, dataDir, damon, addrs)
		testwait.Until(5*time.Second, func() bool { return len(apptest.Leased(t, cli)) == 0 })
		if keys := apptest.Leased(t, cli); len(keys) > 0 {
			t.Errorf("%s: node record left in etcd: %q", when, keys)
		}
	}
	steps := agent.StepNames()
	for _, want := range []string{"etcd", "qos", "listen", "register"} {
		if !strings.Contains(strings.Join(steps, " "), want) {
			t.Fatalf("no step %s in %q", want, steps)
		}
	}
	for _, step := range steps {
		c := cfg
		c.FailAfter = step
		err := agent.Run(context.Background(), c)
		if !errors.Is(err, lifecycle.ErrInjected) {
			t.Fatalf("start failing after %s: %v\n%s", step, err, logs.String())
		}
		check("after a start that failed after " + step)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg) }()
	registered := testwait.Until(60*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("agent stopped: %v\n%s", err, logs.String())
		default:
		}
		return len(apptest.Leased(t, cli)) > 0
	})
	if !registered {
		t.Fatalf("node not registered within 60 s\n%s", logs.String())
	}
	if c, err := net.Dial("tcp", addrs[0]); err != nil {
		t.Errorf("node RPC not listening: %v", err)
	} else {
		c.Close()
	}
	if running := apptest.Snapshot(t, dataDir, damon); running.Kdamonds != "1" || len(running.Swaps) != len(before.Swaps)+1 {
		t.Errorf("running node: nr_kdamonds %s, swaps %q: want dsec's kdamond and zram swap", running.Kdamonds, running.Swaps)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent stop: %v", err)
	}
	check("after a stop")
	if !strings.Contains(logs.String(), "dsec agent serving") {
		t.Error("no serving line")
	}
}
