package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/google/nftables"
)

// The chaos tests (chaos_*_test.go) each record what a node owns on the host
// before they start and check it is back to that afterwards.

// hostState is what one node's data dir owns on the host: mounts under its data
// or run dir, cgroups under its cgroup parent, processes in those cgroups or
// naming its data dir, and the network namespaces those processes hold.
type hostState struct {
	Mounts  []string
	Cgroups []string
	Procs   []string
	NetNS   []string
	Links   []string // the node ends of its sandboxes' links (their addresses go with them)
	Tables  []string // its nftables table, while it has egress sandboxes
}

func (h hostState) String() string {
	return fmt.Sprintf("%d mounts %v, %d cgroups %v, %d processes %v, %d network namespaces, %d links %v, %d nftables tables",
		len(h.Mounts), head(h.Mounts), len(h.Cgroups), head(h.Cgroups), len(h.Procs), head(h.Procs), len(h.NetNS),
		len(h.Links), head(h.Links), len(h.Tables))
}

func head(s []string) []string { return s[:min(len(s), 3)] }

func (h hostState) equal(o hostState) bool {
	return len(h.Mounts) == len(o.Mounts) && len(h.Cgroups) == len(o.Cgroups) &&
		len(h.Procs) == len(o.Procs) && len(h.NetNS) == len(o.NetNS) &&
		len(h.Links) == len(o.Links) && len(h.Tables) == len(o.Tables)
}

// nodeTag is the container driver's tag for a data dir (its run dir and
// cgroup parent are named after it).
func nodeTag(dataDir string) string {
	sum := sha256.Sum256([]byte(filepath.Join(dataDir, "containers")))
	return hex.EncodeToString(sum[:4])
}

// ownedState reads what dataDir's node owns on the host now; the process
// exclude (the server, while it runs) is not counted.
func ownedState(t *testing.T, dataDir string, exclude int) hostState {
	t.Helper()
	tag := nodeTag(dataDir)
	runDir := "/run/dsec/" + tag
	var h hostState
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 {
			if mp := fs[4]; strings.HasPrefix(mp, dataDir+"/") || mp == dataDir || strings.HasPrefix(mp, runDir) {
				h.Mounts = append(h.Mounts, mp)
			}
		}
	}
	f.Close()
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/dsec-" + tag)
	parents = append(parents, "/sys/fs/cgroup/dsec-"+tag)
	for _, p := range parents {
		_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && path != p {
				h.Cgroups = append(h.Cgroups, path)
			}
			return nil
		})
	}
	hostNet, _ := os.Readlink("/proc/1/ns/net")
	netns := map[string]bool{}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		pid, _ := strconv.Atoi(filepath.Base(p))
		if pid == exclude || pid == os.Getpid() {
			continue
		}
		cg, _ := os.ReadFile(p + "/cgroup")
		cmd, _ := os.ReadFile(p + "/cmdline")
		if !strings.Contains(string(cg), "dsec-"+tag) && !strings.Contains(string(cmd), dataDir) {
			continue
		}
		h.Procs = append(h.Procs, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
		if ns, err := os.Readlink(p + "/ns/net"); err == nil && ns != hostNet {
			netns[ns] = true
		}
	}
	for ns := range netns {
		h.NetNS = append(h.NetNS, ns)
	}
	netDir := filepath.Join(dataDir, "netpolicy")
	links, _ := filepath.Glob("/sys/class/net/" + netpolicy.LinkPrefix(netDir) + "*")
	for _, l := range links {
		h.Links = append(h.Links, filepath.Base(l))
	}
	if c, err := nftables.New(); err == nil {
		if ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err == nil {
			for _, tb := range ts {
				if tb.Name == netpolicy.TableName(netDir) {
					h.Tables = append(h.Tables, tb.Name)
				}
			}
		}
	}
	return h
}

// requireBaseline waits up to 30 s for dataDir's host state to equal base
// (teardown finishes asynchronously in places) and fails with the difference;
// it reports whether the state was back.
func requireBaseline(t *testing.T, dataDir string, exclude int, base hostState) bool {
	t.Helper()
	var now hostState
	if !testwait.Until(30*time.Second, func() bool { now = ownedState(t, dataDir, exclude); return now.equal(base) }) {
		t.Errorf("host state not back to its baseline:\n before: %s\n after:  %s", base, now)
		return false
	}
	return true
}

// startChaosNode runs a server on dataDir ("" = a new dir under /var/lib,
// removed when the test ends) and returns it with the host state its data dir
// owned before the server started: what requireBaseline compares with once the
// server has stopped.
func startChaosNode(t *testing.T, dataDir string, args ...string) (*node, hostState) {
	t.Helper()
	if skipAll != "" {
		t.Skip(skipAll)
	}
	if dataDir == "" {
		d, err := os.MkdirTemp("/var/lib", "dsec-e2e-chaos-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dataDir = d
	}
	base := ownedState(t, dataDir, 0)
	n := &node{t: t, dataDir: dataDir, addr: freePort(t), args: args}
	n.start()
	t.Cleanup(func() { n.stop(true) })
	return n, base
}

// deleteAllParallel deletes every sandbox the node lists, 16 at a time.
func (n *node) deleteAllParallel(t *testing.T, ctx context.Context) {
	t.Helper()
	sbs, err := n.cl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, s := range sbs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := n.cl.Delete(ctx, s.ID); err != nil {
				t.Errorf("delete %s: %v", s.ID, err)
			}
		}()
	}
	wg.Wait()
}
