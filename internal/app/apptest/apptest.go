// Package apptest checks, for the role assemblies' tests, that a stopped or
// failed start left nothing on the host: swap and zram devices, dsec's
// kdamond (in a fake DAMON tree, never the real one), the node's nftables
// table, mounts and processes under its data dir, and its listeners.
package apptest

import (
	"bytes"
	"context"
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

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/cluster"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/reclaim/damontest"
)

// Host is what a node may leave on the host.
type Host struct {
	Swaps, Zrams, Mounts, Procs []string
	Kdamonds                    string // nr_kdamonds of the fake DAMON tree
	NftTable                    bool   // the node's inet table exists
}

// Snapshot reads the host's state for a node on dataDir with DAMON faked by
// damon.
func Snapshot(t *testing.T, dataDir string, damon *damontest.Fake) Host {
	t.Helper()
	var h Host
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 0 {
			h.Swaps = append(h.Swaps, f[0])
		}
	}
	h.Zrams, _ = filepath.Glob("/sys/block/zram*")
	b, err = os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, dataDir) {
			h.Mounts = append(h.Mounts, l)
		}
	}
	h.Procs = processesOf(dataDir)
	if damon != nil {
		h.Kdamonds = damon.Get(t, "kdamonds/nr_kdamonds")
	}
	if out, err := exec.Command("nft", "list", "tables").CombinedOutput(); err == nil {
		h.NftTable = bytes.Contains(out, []byte(netpolicy.TableName(filepath.Join(dataDir, "netpolicy"))))
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

// FreePorts returns n loopback addresses nothing listens on.
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
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

// Clean reports, as test errors saying when, what the host has that it did
// not have before: swap, zram devices, mounts, processes, a kdamond, the
// nftables table, and any of addrs still listened on.
func Clean(t *testing.T, when string, before Host, dataDir string, damon *damontest.Fake, addrs []string) {
	t.Helper()
	after := Snapshot(t, dataDir, damon)
	for _, c := range []struct {
		what    string
		was, is []string
	}{{"swap devices", before.Swaps, after.Swaps}, {"zram devices", before.Zrams, after.Zrams},
		{"mounts", before.Mounts, after.Mounts}, {"processes", before.Procs, after.Procs}} {
		if !slices.Equal(c.was, c.is) {
			t.Errorf("%s: %s %q, before %q", when, c.what, c.is, c.was)
		}
	}
	if damon != nil && after.Kdamonds != "0" {
		t.Errorf("%s: nr_kdamonds %s", when, after.Kdamonds)
	}
	if after.NftTable {
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

// Etcd runs an etcd member for the test and returns its client URL and a
// client.
func Etcd(t *testing.T) (string, *clientv3.Client) {
	ports := FreePorts(t, 2)
	cu, pu := "http://"+ports[0], "http://"+ports[1]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cluster.RunEtcd(ctx, cluster.EtcdConfig{Name: "t", DataDir: t.TempDir(), ListenClient: cu, ListenPeer: pu},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		cli, err := cluster.Connect(cctx, cluster.ClientConfig{Endpoints: cu})
		ccancel()
		if err == nil {
			t.Cleanup(func() { cli.Close() })
			return cu, cli
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Leased returns the keys in etcd held by a lease (a registered node's).
func Leased(t *testing.T, cli *clientv3.Client) []string {
	t.Helper()
	resp, err := cli.Get(context.Background(), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 {
			out = append(out, string(kv.Key))
		}
	}
	return out
}
