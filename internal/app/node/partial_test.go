package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/app/apptest"
	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/reclaim/damontest"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// TestPartialStartReleasesEverything fails `dsec server`'s start-up right
// after each of its steps in turn (node.Config.FailAfter) and checks that
// the failed start left nothing: no swap or zram device, no kdamond (in a
// fake DAMON tree), no nftables table, no mount or process under the data
// dir, and every listener's port free. Then a start that succeeds serves
// until canceled and its stop leaves nothing either.
func TestPartialStartReleasesEverything(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dataDir := t.TempDir()
	damon := damontest.New(t, 0)
	addrs := apptest.FreePorts(t, 3)
	var logs bytes.Buffer
	cfg := node.ServerConfig{
		Config: node.Config{
			DataDir: dataDir, Logger: slog.New(slog.NewTextHandler(&logs, nil)), NodeName: "partial",
			NetworkRules: []string{"web=0.0.0.0/0:443"},
			QoS: node.QoSConfig{ZramBytes: 16 << 20, IdleReclaimAfter: time.Minute,
				DAMONRoot: damon.Root, DAMONFS: damon},
		},
		Listen: addrs[0], SandboxFusionListen: addrs[1], MetricsListen: addrs[2],
		ShutdownTimeout: 10 * time.Second,
	}
	before := apptest.Snapshot(t, dataDir, damon)
	check := func(when string) { t.Helper(); apptest.Clean(t, when, before, dataDir, damon, addrs) }
	steps := node.ServerStepNames()
	if len(steps) < 10 {
		t.Fatalf("steps %q", steps)
	}
	for _, step := range steps {
		c := cfg
		c.FailAfter = step
		err := node.Run(context.Background(), c)
		if !errors.Is(err, lifecycle.ErrInjected) || !strings.HasPrefix(err.Error(), step+": ") {
			t.Fatalf("start failing after %s: %v\n%s", step, err, logs.String())
		}
		check("after a start that failed after " + step)
	}
	if !strings.Contains(logs.String(), "dsec server listening") {
		t.Error("no start reached the listener")
	}

	// A start that succeeds, its API served, stopped by its context.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx, cfg) }()
	testwait.For(t, 60*time.Second, "the server listening", func() bool {
		c, err := net.Dial("tcp", addrs[0])
		if err == nil {
			fmt.Fprintf(c, "GET /v1/health HTTP/1.0\r\n\r\n")
			b, _ := io.ReadAll(c)
			c.Close()
			if !bytes.HasPrefix(b, []byte("HTTP/1.0 200")) {
				t.Errorf("health: %q", b)
			}
			return true
		}
		select {
		case err := <-done:
			t.Fatalf("server stopped: %v\n%s", err, logs.String())
		default:
		}
		return false
	})
	// What the checks look for is there while the node runs (they could fail).
	if running := apptest.Snapshot(t, dataDir, damon); running.Kdamonds != "1" || len(running.Swaps) != len(before.Swaps)+1 {
		t.Errorf("running node: nr_kdamonds %s, swaps %q: want dsec's kdamond and zram swap", running.Kdamonds, running.Swaps)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("server stop: %v", err)
	}
	check("after a stop")
	if !strings.Contains(logs.String(), "dsec server stopped") {
		t.Error("no stop line")
	}
}
