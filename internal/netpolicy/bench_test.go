package netpolicy_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/netpolicy"
	"github.com/dsec-dev/dsec/internal/netpolicy/netpolicytest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// connectLoop opens and resets n TCP connections to addr from inside ns on
// one OS thread (SO_LINGER 0: no TIME_WAIT piles up).
func connectLoop(ns *os.File, addr netip.AddrPort, n int) error {
	return netpolicytest.In(ns, func() error {
		sa := &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
		for i := 0; i < n; i++ {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = unix.Connect(fd, sa)
			_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("connect %d: %w", i, err)
			}
		}
		return nil
	})
}

// BenchmarkConnect compares connection setup to a test host through an
// allowed rule (policy chain, conntrack, masquerade) with the same connect
// from a plain namespace routed over a veth by the node, side by side.
func BenchmarkConnect(b *testing.B) {
	netpolicytest.RequireRoot(b)
	m := newBenchManager(b)
	h := netpolicytest.NewHost(b, "dsth", 91)
	target := netip.MustParseAddrPort(h.Listen(b, 0))

	policed := netpolicytest.NewNetns(b)
	if err := m.Apply(context.Background(), "bench-connect", policed, api.NetworkPolicy{
		Allow: []string{h.Addr.String() + ":" + strconv.Itoa(int(target.Port()))}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Release(context.Background(), "bench-connect") })
	// The baseline's link carries the dsec prefix only so that the forward
	// guard (active while dsec holds ip_forward on) lets it route too.
	plain := netpolicytest.Plain(b, "dsvbenchplain", netip.MustParseAddr("198.19.255.0"))

	for _, c := range []struct {
		name string
		ns   *os.File
	}{{"plain-veth", plain}, {"policy-allowed", policed}} {
		b.Run(c.name, func(b *testing.B) {
			if err := connectLoop(c.ns, target, 50); err != nil { // warm caches and neighbours
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := connectLoop(c.ns, target, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
	// The machine is shared and noisy: rounds of 300 connects alternate
	// between the two, and the medians are compared (-benchtime 15x).
	b.Run("alternating-rounds", func(b *testing.B) {
		var plainR, policedR []float64
		for range b.N { // one op: a round of each (run with -benchtime 15x)
			for _, c := range []struct {
				ns  *os.File
				out *[]float64
			}{{plain, &plainR}, {policed, &policedR}} {
				t0 := time.Now()
				if err := connectLoop(c.ns, target, 300); err != nil {
					b.Fatal(err)
				}
				*c.out = append(*c.out, float64(time.Since(t0).Nanoseconds())/300/1000)
			}
		}
		p, q := median(plainR), median(policedR)
		b.ReportMetric(p, "plain-µs/connect")
		b.ReportMetric(q, "policy-µs/connect")
		b.ReportMetric(q/p, "ratio")
	})
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkAttach is the cost egress adds to one sandbox: link, addresses,
// route, chains (and their removal), with a namespace made per iteration as
// a sandbox's init would have.
func BenchmarkAttach(b *testing.B) {
	netpolicytest.RequireRoot(b)
	m := newBenchManager(b)
	// Keep one sandbox attached so the table is not made and dropped each time.
	if err := m.Apply(context.Background(), "bench-anchor", netpolicytest.NewNetns(b), api.NetworkPolicy{Allow: []string{"198.18.92.0/24"}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Release(context.Background(), "bench-anchor") })
	p := api.NetworkPolicy{Allow: []string{"198.18.92.0/24:443", "198.18.93.7"}}
	var attach, release time.Duration
	for i := 0; i < b.N; i++ {
		ns := netpolicytest.NewNetns(b)
		id := "bench-" + strconv.Itoa(i)
		t0 := time.Now()
		if err := m.Apply(context.Background(), id, ns, p); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := m.Release(context.Background(), id); err != nil {
			b.Fatal(err)
		}
		attach += t1.Sub(t0)
		release += time.Since(t1)
		ns.Close()
	}
	b.ReportMetric(float64(attach.Microseconds())/float64(b.N), "attach-µs/op")
	b.ReportMetric(float64(release.Microseconds())/float64(b.N), "release-µs/op")
}

// BenchmarkHTTPFetch is what the host check costs a sandbox's fetch: GET
// over a new connection (HTTP and HTTPS) from a sandbox whose domain rule
// sends the flow through the node's host check, and from one allowed the
// same server by address (the kernel forwards it, no proxy). Rounds of 100
// fetches alternate between the two and the medians are compared (run
// with -benchtime 10x).
func BenchmarkHTTPFetch(b *testing.B) {
	netpolicytest.RequireRoot(b)
	m, err := netpolicy.New(netpolicy.Config{StateDir: b.TempDir(), DNS: "198.18.94.2:53"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	resolver, web := netpolicytest.NewHost(b, "dsth", 94), netpolicytest.NewHost(b, "dsth", 95)
	netpolicytest.DNSServer(b, resolver.NS, "198.18.94.2:53", 3600, map[string]netip.Addr{"bench.org": web.Addr})
	web.WebServer(b)

	apply := func(id string, p api.NetworkPolicy) *os.File {
		ns := netpolicytest.NewNetns(b)
		if err := m.Apply(context.Background(), id, ns, p); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = m.Release(context.Background(), id) })
		return ns
	}
	direct := apply("bench-direct", api.NetworkPolicy{Allow: []string{web.Addr.String() + ":80", web.Addr.String() + ":443"}})
	checked := apply("bench-checked", api.NetworkPolicy{AllowDomains: []string{"bench.org"}})
	if _, _, err := netpolicytest.Lookup(checked, "203.0.113.53:53", "bench.org", false); err != nil {
		b.Fatal(err)
	}
	for _, scheme := range []struct {
		name string
		port int
	}{{"http", 80}, {"https", 443}} {
		url := scheme.name + "://bench.org/"
		addr := web.Addr.String() + ":" + strconv.Itoa(scheme.port)
		round := func(ns *os.File, n int) (time.Duration, error) {
			c := netpolicytest.WebClient(ns, addr)
			t0 := time.Now()
			for range n {
				if _, err := netpolicytest.Fetch(c, url); err != nil {
					return 0, err
				}
			}
			return time.Since(t0) / time.Duration(n), nil
		}
		b.Run(scheme.name, func(b *testing.B) {
			var directR, checkedR []float64
			for range b.N { // one op: a round of each
				for _, c := range []struct {
					ns  *os.File
					out *[]float64
				}{{direct, &directR}, {checked, &checkedR}} {
					d, err := round(c.ns, 100)
					if err != nil {
						b.Fatal(err)
					}
					*c.out = append(*c.out, float64(d.Nanoseconds())/1000)
				}
			}
			p, q := median(directR), median(checkedR)
			b.ReportMetric(p, "direct-µs/fetch")
			b.ReportMetric(q, "checked-µs/fetch")
			b.ReportMetric(q/p, "ratio")
		})
	}
}
