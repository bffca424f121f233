package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestTwoServersShareOneHost: two `dsec server`s on one host, each with its
// own data dir and listen address and the same link address pool, give
// their sandboxes egress side by side: every sandbox gets an address no
// other holds, and every allowed connection succeeds, from both nodes at
// once.
func TestTwoServersShareOneHost(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	h := netpolicytest.NewHost(t, "dste", 82)
	addr := h.Listen(t, 8080)
	allow := &api.NetworkPolicy{Allow: []string{h.Addr.String() + "/32:8080"}}
	nodes := []*node{startNode(t), startNode(t)}
	type sbx struct {
		n  *node
		id string
	}
	var all []sbx
	seen := map[string]string{}
	for i, n := range nodes {
		for j := 0; j < 2; j++ {
			id := n.create(t, api.CreateSandboxRequest{Network: allow})
			all = append(all, sbx{n, id})
			st := n.network(t, id)
			if st == nil || st.Address == "" {
				t.Fatalf("node %d sandbox %s: network %+v", i, id, st)
			}
			if other, dup := seen[st.Address]; dup {
				t.Errorf("node %d sandbox %s has address %s, already held by %s", i, id, st.Address, other)
			}
			seen[st.Address] = id
		}
	}
	for round := 0; round < 2; round++ {
		for _, s := range all {
			if out, ok := s.n.connect(t, s.id, addr); !ok || !strings.HasPrefix(out, "hello from") {
				t.Errorf("sandbox %s: allowed connection to %s failed: %q (network %+v)", s.id, addr, out, s.n.network(t, s.id))
			}
		}
	}
	for _, s := range all {
		if st := s.n.network(t, s.id); st == nil || st.Denied != 0 {
			t.Errorf("sandbox %s: network %+v, want 0 denied", s.id, st)
		}
	}
	ctx := context.Background()
	for _, s := range all {
		if err := s.n.cl.Delete(ctx, s.id); err != nil {
			t.Errorf("delete %s: %v", s.id, err)
		}
	}
}

// TestNodeSkipsAddressOfOrphanedSandbox: a node killed with its network
// state removed (as a killed test leaves it) has a sandbox whose link still
// holds its address, though no claim says so any more once the next node
// prunes the dead one. The next node gives its sandbox another address,
// and egress that works; the dead node, given its state back, re-adopts
// its sandbox, whose egress works too.
func TestNodeSkipsAddressOfOrphanedSandbox(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	h := netpolicytest.NewHost(t, "dste", 83)
	addr := h.Listen(t, 8080)
	allow := &api.NetworkPolicy{Allow: []string{h.Addr.String() + "/32:8080"}}
	dead := startNode(t)
	orphan := dead.create(t, api.CreateSandboxRequest{Network: allow})
	orphanAddr := dead.network(t, orphan).Address
	dead.stop(false)
	state := filepath.Join(dead.dataDir, "netpolicy")
	if err := os.Rename(state, state+".away"); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := os.Rename(state+".away", state); err != nil {
				t.Fatal(err)
			}
			// On a fresh port: the old one lies in the ephemeral range, and
			// any connection on the host may have taken it meanwhile.
			dead.addr = freePort(t)
			dead.start()
		}
	}
	t.Cleanup(restore) // before the node's own cleanup deletes the sandbox

	// The first egress sandbox of a node prunes the dead node's claims (after
	// its own address is claimed); the next node to start allocates from the
	// bottom of the pool, where the orphaned link's pair is.
	n1 := startNode(t)
	id1 := n1.create(t, api.CreateSandboxRequest{Network: allow})
	n := startNode(t)
	id := n.create(t, api.CreateSandboxRequest{Network: allow})
	for _, c := range []struct {
		n  *node
		id string
	}{{n1, id1}, {n, id}} {
		st := c.n.network(t, c.id)
		if st == nil || st.Address == orphanAddr {
			t.Errorf("sandbox %s got %+v, the address the orphaned sandbox's link holds (%s)", c.id, st, orphanAddr)
		}
		if out, ok := c.n.connect(t, c.id, addr); !ok || !strings.HasPrefix(out, "hello from") {
			t.Errorf("sandbox %s: allowed connection failed: %q (network %+v)", c.id, out, c.n.network(t, c.id))
		}
	}
	restore()
	for _, c := range []struct {
		n  *node
		id string
	}{{dead, orphan}, {n1, id1}, {n, id}} {
		if out, ok := c.n.connect(t, c.id, addr); !ok || !strings.HasPrefix(out, "hello from") {
			t.Errorf("sandbox %s after the re-adoption: allowed connection failed: %q (network %+v)", c.id, out, c.n.network(t, c.id))
		}
	}
}

// TestEgressCreateFailsCleanly: a sandbox's link is made while its init
// starts; when it cannot be (the node's link address pool, a /30 here, holds
// two sandboxes), the create answers resource_exhausted naming the pool and
// leaves nothing: no sandbox, no address on the host, and the two sandboxes
// that have links keep their egress. Once one is deleted its pair is handed
// out again.
func TestEgressCreateFailsCleanly(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	const pool = "10.251.77.0/30"
	h := netpolicytest.NewHost(t, "dstf", 83)
	addr := h.Listen(t, 8080)
	allow := &api.NetworkPolicy{Allow: []string{h.Addr.String() + "/32:8080"}}
	n := startNode(t, "--network-pool", pool)
	poolAddrs := func() int {
		out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(out), " 10.251.77.")
	}
	a := n.create(t, api.CreateSandboxRequest{Network: allow})
	b := n.create(t, api.CreateSandboxRequest{Network: allow})
	if got := poolAddrs(); got != 2 {
		t.Fatalf("%d host addresses from %s with two egress sandboxes, want 2", got, pool)
	}
	ctx := context.Background()
	_, err := n.cl.Create(ctx, api.CreateSandboxRequest{Network: allow})
	if ae, ok := api.AsError(err); !ok || ae.Code != api.CodeResourceExhausted || !strings.Contains(ae.Message, pool) {
		t.Fatalf("third egress create: %v, want resource_exhausted naming %s", err, pool)
	}
	if sbs, err := n.cl.List(ctx); err != nil || len(sbs) != 2 {
		t.Fatalf("after the refused create: %d sandboxes (%v), want 2", len(sbs), err)
	}
	if got := poolAddrs(); got != 2 {
		t.Fatalf("the refused create left %d host addresses from %s, want 2", got, pool)
	}
	// Its init was up when the link could not be made: its control socket goes too.
	run := container.DefaultRunDir(filepath.Join(n.dataDir, "containers"))
	if socks, _ := filepath.Glob(filepath.Join(run, "*.sock")); len(socks) != 2 {
		t.Fatalf("the refused create left control sockets: %v, want a's and b's", socks)
	}
	for _, id := range []string{a, b} {
		if out, ok := n.connect(t, id, addr); !ok || !strings.HasPrefix(out, "hello from") {
			t.Errorf("sandbox %s lost its egress: %q", id, out)
		}
	}
	if err := n.cl.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	c := n.create(t, api.CreateSandboxRequest{Network: allow})
	if out, ok := n.connect(t, c, addr); !ok || !strings.HasPrefix(out, "hello from") {
		t.Errorf("sandbox %s, made after a delete freed a pair: %q", c, out)
	}
}
