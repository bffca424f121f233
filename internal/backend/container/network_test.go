package container_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/dsec-dev/dsec/internal/backend/container"
	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// listLinksCmd lists a sandbox's network interfaces from its own /proc/net
// (/sys/class/net in a sandbox is the node's shared sysfs, not its namespace).
const listLinksCmd = `sed -n 's/^ *\([^:]*\):.*/\1/p' /proc/net/dev | sort`

// netDriver is a container driver with a network policy manager whose rule
// set "mirror" names the given destinations.
func netDriver(t *testing.T, mirror string) (*container.Driver, *netpolicy.Manager) {
	t.Helper()
	rs := netpolicy.RuleSets{}
	if mirror != "" {
		if err := rs.Add("mirror=" + mirror); err != nil {
			t.Fatal(err)
		}
	}
	return netDriverWith(t, netpolicy.Config{Rules: rs, DNS: "off"})
}

// netDriverWith is a container driver with a network policy manager made
// from cfg (in a state dir of the test's).
func netDriverWith(t *testing.T, cfg netpolicy.Config) (*container.Driver, *netpolicy.Manager) {
	t.Helper()
	cfg.StateDir = t.TempDir()
	m, err := netpolicy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dcfg := testConfig(t)
	dcfg.Network = m
	d, err := container.New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		_ = m.Close()
		c, _ := nftables.New()
		if _, err := c.ListTableOfFamily(m.TableName(), nftables.TableFamilyINet); err == nil {
			t.Errorf("table inet %s left behind", m.TableName())
		}
	})
	return d, m
}

func startNet(t *testing.T, d driver.Driver, layers []driver.Layer, p *api.NetworkPolicy) driver.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("np"), Layers: layers, Memory: 128 << 20, Disk: 32 << 20, PidsMax: 128})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Destroy(context.Background()) })
	if p != nil {
		if err := inst.(driver.Networker).SetNetwork(ctx, *p); err != nil {
			t.Fatalf("SetNetwork: %v", err)
		}
	}
	return inst
}

// tcp connects from inside the sandbox with bash's /dev/tcp and returns what
// the peer said, or the error bash printed.
func tcp(t *testing.T, inst driver.Instance, addr string) (string, bool) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	out, errOut, ok := bash5(t, inst, fmt.Sprintf("exec 3<>/dev/tcp/%s/%s && timeout 3 cat <&3", host, port))
	if !ok {
		return errOut, false
	}
	return out, true
}

// bash5 runs script with bash in the sandbox for at most 5 s and returns its
// output, its errors and whether it succeeded.
func bash5(t *testing.T, inst driver.Instance, script string) (string, string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := drivertest.Exec(ctx, inst, driver.ProcSpec{Args: []string{"timeout", "5", "bash", "-c", script}, Cwd: "/"}, "")
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	return r.Stdout, r.Stderr, r.Exit.Code == 0
}

func denied(t *testing.T, inst driver.Instance) uint64 {
	t.Helper()
	st, err := inst.(driver.Networker).Network()
	if err != nil || st == nil {
		t.Fatalf("Network(): %+v %v", st, err)
	}
	return st.Denied
}

// TestNetworkPolicyInRealSandboxes: a sandbox reaches what its policy allows
// on a test host and nothing else (other ports and hosts, the node on any of
// its addresses or loopback, another sandbox); a policy change applies to new
// connections; the counter counts; delete removes link, rules and table.
func TestNetworkPolicyInRealSandboxes(t *testing.T) {
	lower := requireImage(t, "debian")
	h1 := netpolicytest.NewHost(t, "dstc", 61)
	h2 := netpolicytest.NewHost(t, "dstc", 62)
	open, other, far := h1.Listen(t, 0), h1.Listen(t, 0), h2.Listen(t, 0)
	_, openPort, _ := net.SplitHostPort(open)
	node := netpolicytest.Listen(t, nil, "0.0.0.0:0")
	_, nodePort, _ := net.SplitHostPort(node)
	nodeLo := netpolicytest.Listen(t, nil, "127.0.0.1:0")

	d, m := netDriver(t, h1.Addr.String()+":"+openPort)
	plain := startNet(t, d, lower, nil)
	a := startNet(t, d, lower, &api.NetworkPolicy{Rules: []string{"mirror"}})
	b := startNet(t, d, lower, &api.NetworkPolicy{Allow: []string{"0.0.0.0/1", "128.0.0.0/1"}})

	if out, ok := tcp(t, a, open); !ok || !strings.HasPrefix(out, "hello from") {
		t.Fatalf("allowed destination: ok=%v %q", ok, out)
	}
	if n := denied(t, a); n != 0 {
		t.Fatalf("denied = %d after an allowed connection", n)
	}
	refused := []string{other, far, "127.0.0.1:" + strings.Split(nodeLo, ":")[1]}
	for _, ha := range netpolicytest.HostAddrs(t) {
		refused = append(refused, net.JoinHostPort(ha.String(), nodePort))
	}
	// b's policy allows every IPv4 destination: still not the node.
	for _, addr := range refused {
		if out, ok := tcp(t, a, addr); ok {
			t.Errorf("%s reachable from a sandbox (%q)", addr, out)
		}
	}
	for _, ha := range netpolicytest.HostAddrs(t) {
		if out, ok := tcp(t, b, net.JoinHostPort(ha.String(), nodePort)); ok {
			t.Errorf("node address %s reachable under an allow-everything policy (%q)", ha, out)
		}
	}
	if out, ok := tcp(t, b, far); !ok {
		t.Fatalf("allow-everything policy cannot reach a test host: %q", out)
	}
	// 127.0.0.1 is the sandbox's own loopback: not counted, everything else is.
	if got, want := denied(t, a), uint64(len(refused)-1); got != want {
		t.Errorf("denied = %d, want %d", got, want)
	}
	// Nor another sandbox (a listens on every address of its own).
	listener := `import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 2222)); s.listen()
while True:
    c, _ = s.accept(); c.send(b"hello from a\n"); c.close()`
	pr, err := a.Exec(context.Background(), driver.ProcSpec{Args: []string{"python3", "-c", listener}, Cwd: "/", Tag: "listener"}, driver.Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	pr.Close()
	for i := 0; ; i++ {
		if _, ok := tcp(t, a, "127.0.0.1:2222"); ok {
			break
		} else if i == 50 {
			t.Fatal("listener in sandbox a did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	aAddr := mustNetwork(t, a).Address
	if out, ok := tcp(t, b, net.JoinHostPort(aAddr, "2222")); ok {
		t.Errorf("sandbox b reached sandbox a at %s (%q)", aAddr, out)
	}

	// Next stage: nothing allowed; then the mirror again.
	if err := a.(driver.Networker).SetNetwork(context.Background(), api.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	if out, ok := tcp(t, a, open); ok {
		t.Fatalf("reachable after the policy was emptied: %q", out)
	}
	if err := a.(driver.Networker).SetNetwork(context.Background(), api.NetworkPolicy{Rules: []string{"mirror"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := tcp(t, a, open); !ok {
		t.Fatal("not reachable after the policy was restored")
	}

	if out := mustSh(t, a, listLinksCmd); strings.Join(strings.Fields(out), ",") != "eth0,lo" {
		t.Errorf("links in an egress sandbox: %q", out)
	}
	// No egress, no cost: loopback only, no link on the node.
	out := mustSh(t, plain, listLinksCmd)
	if strings.Fields(out)[0] != "lo" || len(strings.Fields(out)) != 1 {
		t.Errorf("links in a sandbox without egress: %q", out)
	}
	if st, err := plain.(driver.Networker).Network(); st != nil || err != nil {
		t.Errorf("network status of a loopback-only sandbox: %+v %v", st, err)
	}

	// Bad policies are refused before anything happens.
	for _, p := range []api.NetworkPolicy{{Allow: []string{"10.1.2.3/24"}}, {Rules: []string{"pypi"}}, {Allow: []string{"10.1.2.3:0-9"}}} {
		if err := plain.(driver.Networker).SetNetwork(context.Background(), p); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("%+v: %v, want invalid_argument", p, err)
		}
	}
	if out := mustSh(t, plain, listLinksCmd); strings.TrimSpace(out) != "lo" {
		t.Errorf("a refused policy left links: %q", out)
	}

	// Egress given at runtime to a sandbox created without it.
	if err := plain.(driver.Networker).SetNetwork(context.Background(), api.NetworkPolicy{Allow: []string{open}}); err != nil {
		t.Fatal(err)
	}
	if out, ok := tcp(t, plain, open); !ok {
		t.Fatalf("runtime egress: %q", out)
	}
	if _, ok := tcp(t, plain, other); ok {
		t.Fatal("runtime egress reaches a port it does not allow")
	}

	// Delete removes the link (and the last one the table, checked at cleanup).
	var links []string
	for _, in := range []driver.Instance{a, b, plain} {
		links = append(links, netpolicytest.NodeLink(t, mustNetwork(t, in).Address))
	}
	for _, in := range []driver.Instance{a, b, plain} {
		if err := in.Destroy(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	m.Settle()
	netpolicytest.AwaitLinksGone(t, 0, links...)
}

func mustNetwork(t *testing.T, inst driver.Instance) *api.NetworkStatus {
	t.Helper()
	st, err := inst.(driver.Networker).Network()
	if err != nil || st == nil {
		t.Fatalf("Network(): %+v %v", st, err)
	}
	return st
}

func mustSh(t *testing.T, inst driver.Instance, script string) string {
	t.Helper()
	r, err := drivertest.Exec(context.Background(), inst, driver.ProcSpec{Args: []string{"sh", "-c", script}, Cwd: "/"}, "")
	if err != nil || r.Exit.Code != 0 {
		t.Fatalf("%s: %+v %v", script, r, err)
	}
	return r.Stdout
}

// BenchmarkStartEgress compares create+start of sandboxes with egress (link,
// addresses, rules) against default loopback-only ones, side by side, as
// `dsec bench create` does: b.N creates timed, then all destroyed (reported
// as destroy-ms/op); network-ms/op is the SetNetwork share of a create.
func BenchmarkStartEgress(b *testing.B) {
	for _, c := range []struct {
		name string
		p    *api.NetworkPolicy
	}{{"default", nil}, {"egress", &api.NetworkPolicy{Allow: []string{"198.18.70.0/24:443", "198.18.71.7"}}},
		{"default-again", nil}, {"egress-again", &api.NetworkPolicy{Allow: []string{"198.18.70.0/24:443"}}}} {
		b.Run(c.name, func(b *testing.B) {
			d, layers := benchDriver(b)
			var setnet time.Duration
			insts := make([]driver.Instance, 0, b.N)
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				inst, err := d.Start(ctx, driver.Spec{ID: drivertest.NewID("nb"), Layers: layers, Memory: 128 << 20, Disk: 32 << 20, PidsMax: 128})
				if err != nil {
					b.Fatal(err)
				}
				insts = append(insts, inst)
				if c.p != nil {
					t0 := time.Now()
					if err := inst.(driver.Networker).SetNetwork(ctx, *c.p); err != nil {
						b.Fatal(err)
					}
					setnet += time.Since(t0)
				}
			}
			b.StopTimer()
			t0 := time.Now()
			for _, inst := range insts {
				if err := inst.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(t0).Microseconds())/float64(b.N)/1000, "destroy-ms/op")
			b.ReportMetric(float64(setnet.Microseconds())/float64(b.N)/1000, "network-ms/op")
		})
	}
}

// benchDriver is a container driver with a network manager, private to b.
func benchDriver(b *testing.B) (*container.Driver, []driver.Layer) {
	b.Helper()
	netpolicytest.RequireRoot(b)
	img, err := (&image.Store{Dir: imagesDir()}).Resolve("debian")
	if err != nil {
		b.Skipf("image debian not available: %v", err)
	}
	state, err := os.MkdirTemp("/var/lib", "dsec-cb-")
	if err != nil {
		b.Fatal(err)
	}
	run, err := os.MkdirTemp("/run", "dsec-cb-")
	if err != nil {
		b.Fatal(err)
	}
	m, err := netpolicy.New(netpolicy.Config{StateDir: filepath.Join(state, "netpolicy")})
	if err != nil {
		b.Fatal(err)
	}
	d, err := container.New(container.Config{StateDir: filepath.Join(state, "containers"), RunDir: run,
		CgroupParent: "dsec-bench-" + filepath.Base(state), Network: m})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		d.Close()
		_ = m.Close()
		os.RemoveAll(state)
		os.RemoveAll(run)
	})
	return d, driver.DirLayers(img.Lower())
}
