package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// listLinksCmd lists a sandbox's network interfaces from its own /proc/net
// (/sys/class/net in a sandbox is the node's shared sysfs, not its namespace).
const listLinksCmd = `sed -n 's/^ *\([^:]*\):.*/\1/p' /proc/net/dev | sort`

// connect tries a TCP connection from inside sandbox id (bash /dev/tcp) and
// returns what the peer said; ok is false when the connection failed.
func (n *node) connect(t *testing.T, id, addr string) (string, bool) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	r := n.sh(t, id, fmt.Sprintf("timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s && timeout 3 cat <&3'", host, port))
	return r.Stdout + r.Stderr, r.ExitCode == 0
}

func (n *node) network(t *testing.T, id string) *api.NetworkStatus {
	t.Helper()
	sb, err := n.cl.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.Network
}

// TestNetworkPolicy drives egress end to end: operator rule sets on the
// server, policies on create, through PUT and the CLI, refusals of bad input
// with nothing created, the denied counter on GET, re-adoption after a kill
// -9, and nothing left on the node (links, table, ip_forward) afterwards.
func TestNetworkPolicy(t *testing.T) {
	if skipAll != "" {
		t.Skip(skipAll)
	}
	h := netpolicytest.NewHost(t, "dste", 81) // 198.18.81.2, its own namespace: fixed ports are free
	mirror := h.Listen(t, 8080)
	other := h.Listen(t, 8081)
	nodeL := netpolicytest.Listen(t, nil, "0.0.0.0:0")
	_, nodePort, _ := net.SplitHostPort(nodeL)
	forwardBefore, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")

	n := startNode(t, "--network-rule", "mirror="+mirror)
	ctx := context.Background()

	// Bad input: 400 invalid_argument with a clear message, nothing created.
	for _, p := range []api.NetworkPolicy{
		{Allow: []string{"10.0.0.0/33"}}, {Allow: []string{"10.1.2.3/24"}}, {Allow: []string{"198.18.81.2:0"}},
		{Allow: []string{"198.18.81.2:80-70000"}}, {Rules: []string{"pypi"}}, {Allow: []string{"127.0.0.1:22"}},
	} {
		_, err := n.cl.Create(ctx, api.CreateSandboxRequest{Network: &p})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument || ae.Message == "" {
			t.Errorf("create with %+v: %v, want 400 invalid_argument", p, err)
		}
	}
	if sbs, _ := n.cl.List(ctx); len(sbs) != 0 {
		t.Fatalf("bad creates left sandboxes: %+v", sbs)
	}
	if recs, _ := filepath.Glob(filepath.Join(n.dataDir, "netpolicy", "*.json")); len(recs) > 0 {
		t.Fatalf("bad creates left network records: %v", recs)
	}

	// A sandbox whose policy names the mirror rule set.
	id := n.create(t, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Rules: []string{"mirror"}}})
	plain := n.create(t, api.CreateSandboxRequest{})
	if out, ok := n.connect(t, id, mirror); !ok || !strings.HasPrefix(out, "hello from") {
		t.Fatalf("mirror not reachable: %q", out)
	}
	for _, addr := range []string{other, net.JoinHostPort(h.NodeAddr.String(), nodePort), "192.0.2.2:" + nodePort} {
		if out, ok := n.connect(t, id, addr); ok {
			t.Errorf("%s reachable (%q)", addr, out)
		}
	}
	st := n.network(t, id)
	if st == nil || st.Denied != 3 || st.Rules[0] != "mirror" || st.Address == "" {
		t.Fatalf("GET network: %+v, want 3 denied", st)
	}
	if r := n.sh(t, id, listLinksCmd); strings.Join(strings.Fields(r.Stdout), ",") != "eth0,lo" {
		t.Errorf("egress sandbox links: %q", r.Stdout)
	}
	if st := n.network(t, plain); st != nil {
		t.Errorf("loopback-only sandbox has network %+v", st)
	}
	if r := n.sh(t, plain, listLinksCmd); strings.TrimSpace(r.Stdout) != "lo" {
		t.Errorf("loopback-only sandbox links: %q", r.Stdout)
	}

	// Next task stage through the CLI: only the other port.
	out, errOut, code := n.cli(t, "", "network", id, "--allow", other)
	if code != 0 {
		t.Fatalf("dsec network: %d %s", code, errOut)
	}
	var cliSt api.NetworkStatus
	if err := json.Unmarshal([]byte(out), &cliSt); err != nil || len(cliSt.Allow) != 1 || cliSt.Allow[0] != other {
		t.Fatalf("dsec network printed %q: %v", out, err)
	}
	if _, ok := n.connect(t, id, other); !ok {
		t.Fatal("other port not reachable after the change")
	}
	if _, ok := n.connect(t, id, mirror); ok {
		t.Fatal("mirror still reachable after the change")
	}
	// A bad PUT changes nothing.
	var ae *api.Error
	if _, err := n.cl.SetNetwork(ctx, id, api.NetworkPolicy{Allow: []string{"198.18.81.2:99999"}}); !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument {
		t.Fatalf("bad PUT: %v", err)
	}
	if _, errOut, code := n.cli(t, "", "network", id, "--rule", "nope"); code == 0 || !strings.Contains(errOut, `unknown rule "nope"`) {
		t.Fatalf("dsec network --rule nope: %d %q", code, errOut)
	}
	if _, ok := n.connect(t, id, other); !ok {
		t.Fatal("a refused PUT changed the policy")
	}

	// Re-adoption: kill -9, start again; policy and counter are still there.
	n.stop(false)
	n.start()
	st = n.network(t, id)
	if st == nil || st.Denied != 4 || len(st.Allow) != 1 {
		t.Fatalf("after restart: %+v", st)
	}
	if _, ok := n.connect(t, id, other); !ok {
		t.Fatal("policy lost in the restart")
	}
	// Reset: a fresh sandbox (new namespace, new link) under the same policy.
	if _, err := n.cl.Reset(ctx, id); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if _, ok := n.connect(t, id, other); !ok {
		t.Fatal("policy lost in the reset")
	}
	if _, ok := n.connect(t, id, mirror); ok {
		t.Fatal("mirror reachable after the reset")
	}
	sb, err := n.cl.SetNetwork(ctx, id, api.NetworkPolicy{})
	if err != nil || sb.Network == nil || len(sb.Network.Allow) != 0 {
		t.Fatalf("empty policy: %+v %v", sb.Network, err)
	}
	if _, ok := n.connect(t, id, other); ok {
		t.Fatal("reachable under an empty policy")
	}

	// Delete: the link, the rules and the table go.
	link := netpolicytest.NodeLink(t, n.network(t, id).Address)
	for _, s := range []string{id, plain} {
		if err := n.cl.Delete(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	netpolicytest.AwaitLinksGone(t, 5*time.Second, link)
	n.stop(true)
	c, _ := nftables.New()
	table := netpolicy.TableName(filepath.Join(n.dataDir, "netpolicy"))
	if _, err := c.ListTableOfFamily(table, nftables.TableFamilyINet); err == nil {
		t.Errorf("table inet %s left after the last sandbox", table)
	}
	if recs, _ := filepath.Glob(filepath.Join(n.dataDir, "netpolicy", "*.json")); len(recs) > 0 {
		t.Errorf("records left: %v", recs)
	}
	if holders, _ := os.ReadDir("/run/dsec/netpolicy/forward"); len(holders) == 0 {
		if now, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); string(now) != string(forwardBefore) {
			t.Errorf("ip_forward %q after the last egress sandbox, was %q", now, forwardBefore)
		}
	}
}
