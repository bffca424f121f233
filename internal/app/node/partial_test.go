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
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/app/lifecycle"
	"github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/reclaim/damontest"
)

// host is what a node may leave on the host: swap devices, zram devices,
// dsec's kdamond in the fake DAMON tree, the node's nftables table, mounts and
// processes under its data dir, and its listeners.
type host struct {
	swaps, zrams, mounts, procs []string
	kdamonds                    string
	nftTable                    bool
}

func snapshot(t *testing.T, dataDir string, damon *damontest.Fake) host {
	t.Helper()
	var h host
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 0 {
			h.swaps = append(h.swaps, f[0])
		}
	}
	h.zrams, _ = filepath.Glob("/sys/block/zram*")
	b, err = os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, dataDir) {
			h.mounts = append(h.mounts, l)
		}
	}
	h.procs = processesOf(dataDir)
	h.kdamonds = damon.Get(t, "kdamonds/nr_kdamonds")
	if out, err := exec.Command("nft", "list", "tables").CombinedOutput(); err == nil {
		h.nftTable = bytes.Contains(out, []byte(netpolicy.TableName(filepath.Join(dataDir, "netpolicy"))))
	}
	return h
}

// processesOf lists the processes other than this one whose command line or
// working directory names dir, and this process's children.
func processesOf(dir string) []string {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		_, rest, _ := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if f[1] == strconv.Itoa(self) || bytes.Contains(cmd, []byte(dir)) || strings.HasPrefix(cwd, dir) {
			out = append(out, fmt.Sprintf("%d %q", pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// freePorts returns n loopback addresses nothing listens on.
func freePorts(t *testing.T, n int) []string {
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Addr().String())
		defer l.Close()
	}
	return out
}

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
	addrs := freePorts(t, 3)
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
	before := snapshot(t, dataDir, damon)
	check := func(when string) {
		t.Helper()
		after := snapshot(t, dataDir, damon)
		for _, c := range []struct {
			what    string
			was, is []string
		}{{"swap devices", before.swaps, after.swaps}, {"zram devices", before.zrams, after.zrams},
			{"mounts", before.mounts, after.mounts}, {"processes", before.procs, after.procs}} {
			if !slices.Equal(c.was, c.is) {
				t.Errorf("%s: %s %q, before %q", when, c.what, c.is, c.was)
			}
		}
		if after.kdamonds != "0" {
			t.Errorf("%s: nr_kdamonds %s", when, after.kdamonds)
		}
		if after.nftTable {
			t.Errorf("%s: the node's nftables table is left", when)
		}
		for _, a := range addrs {
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Errorf("%s: listener %s left: %v", when, a, err)
				continue
			}
			l.Close()
		}
	}
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", addrs[0])
		if err == nil {
			fmt.Fprintf(c, "GET /v1/health HTTP/1.0\r\n\r\n")
			b, _ := io.ReadAll(c)
			c.Close()
			if !bytes.HasPrefix(b, []byte("HTTP/1.0 200")) {
				t.Errorf("health: %q", b)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("server stopped: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("server not listening within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What the checks look for is there while the node runs (they could fail).
	if running := snapshot(t, dataDir, damon); running.kdamonds != "1" || len(running.swaps) != len(before.swaps)+1 {
		t.Errorf("running node: nr_kdamonds %s, swaps %q: want dsec's kdamond and zram swap", running.kdamonds, running.swaps)
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
