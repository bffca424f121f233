package netpolicy

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/netpolicy/dnstcp"
)

// The node's DNS forwarder. Every DNS packet (TCP or UDP port 53, to any
// resolver) an egress sandbox sends is redirected to it by the node's
// nftables table (setDNS), so a sandbox resolves through the node whatever
// its resolv.conf names, and cannot resolve around it. The forwarder knows
// the sandbox by the packet's source address (which the reverse-path check
// vouches for), answers NXDOMAIN for its denied names, forwards the rest to
// the node's resolver, and for a name its policy allows puts the public IPv4
// addresses of the answer into the sandbox's learned set for the record's
// TTL (at least minLearn) before the answer reaches the sandbox. Addresses
// in private, link-local, loopback, multicast or pool ranges are never
// learned (a name that resolves inside the node's network does not open it).

const (
	minLearn     = 5 * time.Second // shortest time a learned address stays
	maxLearn     = 24 * time.Hour
	upstreamWait = 4 * time.Second
	tcpIdle      = 10 * time.Second
	maxInflight  = 256
)

// dnsView is what the forwarder knows of one egress sandbox.
type dnsView struct {
	id      string
	link    string
	allow   []string
	deny    []string
	entries []Entry                  // the policy's address entries
	learned map[netip.Addr]time.Time // address → when its set entry expires
	// names are the names each learned address was an answer for, with
	// when that ends (the host check admits only those).
	names map[netip.Addr]map[string]time.Time
	// refused counts the flows the host check reset (kept across policy
	// changes, as the kernel's denied counter is).
	refused *atomic.Uint64
}

type forwarder struct {
	m        *Manager
	log      *slog.Logger
	upstream netip.AddrPort
	udp      *net.UDPConn
	tcp      *net.TCPListener
	port     uint16
	sem      chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	views map[netip.Addr]*dnsView // by sandbox address
}

// systemResolver is the first nameserver of /etc/resolv.conf, port 53.
func systemResolver() (netip.AddrPort, error) {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil && a.Zone() == "" {
				return netip.AddrPortFrom(a, 53), nil
			}
		}
	}
	return netip.AddrPort{}, errors.New("no nameserver in /etc/resolv.conf")
}

// startForwarder listens on one port for UDP and TCP on every address of
// the node (sandbox links come and go; packets from anything but a known
// sandbox are ignored).
func startForwarder(m *Manager, upstream netip.AddrPort) (*forwarder, error) {
	f := &forwarder{m: m, log: m.log, upstream: upstream, sem: make(chan struct{}, maxInflight), views: map[netip.Addr]*dnsView{}}
	var err error
	for range 8 {
		f.udp, err = net.ListenUDP("udp4", &net.UDPAddr{})
		if err != nil {
			return nil, err
		}
		port := f.udp.LocalAddr().(*net.UDPAddr).Port
		f.tcp, err = net.ListenTCP("tcp4", &net.TCPAddr{Port: port})
		if err == nil {
			f.port = uint16(port)
			break
		}
		f.udp.Close()
	}
	if err != nil {
		return nil, err
	}
	f.wg.Add(2)
	go f.serveUDP()
	go f.serveTCP()
	return f, nil
}

func (f *forwarder) close() {
	f.udp.Close()
	f.tcp.Close()
	f.wg.Wait()
}

// set records (or, with v nil, forgets) the view of the sandbox at addr;
// keep says whether learned addresses stay (the allowed names did not change).
func (f *forwarder) set(addr netip.Addr, v *dnsView, keep bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.views[addr]
	if v != nil && old != nil && keep {
		v.learned, v.names = old.learned, old.names
	}
	if v != nil {
		v.refused = new(atomic.Uint64)
		if old != nil {
			v.refused = old.refused
		}
	}
	if v == nil {
		delete(f.views, addr)
		return
	}
	if v.learned == nil {
		v.learned, v.names = map[netip.Addr]time.Time{}, map[netip.Addr]map[string]time.Time{}
	}
	f.views[addr] = v
}

func (f *forwarder) view(addr netip.Addr) *dnsView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.views[addr]
}

// admits says whether the sandbox at src may reach dst asking for name:
// its rules allow name and dst was learned for name, and has not expired.
func (f *forwarder) admits(src, dst netip.Addr, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.views[src]
	if v == nil || !domainMatch(v.allow, name) {
		return false
	}
	return v.names[dst][name].After(time.Now())
}

// byAddress says whether the policy of the sandbox at src admits dst by an
// address entry (learned addresses are public, outside every range no
// entry reaches, so containment is the chain's verdict).
func (f *forwarder) byAddress(src netip.Addr, dst netip.AddrPort) bool {
	v := f.view(src)
	if v == nil {
		return false
	}
	for _, e := range v.entries {
		if e.Prefix.Contains(dst.Addr()) && (e.PortLo == 0 || e.PortLo <= dst.Port() && dst.Port() <= e.PortHi) {
			return true
		}
	}
	return false
}

// refused is how many flows of the sandbox at addr the host check reset.
func (f *forwarder) refused(addr netip.Addr) uint64 {
	if v := f.view(addr); v != nil {
		return v.refused.Load()
	}
	return 0
}

func (f *forwarder) serveUDP() {
	defer f.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := f.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		src := from.Addr().Unmap()
		if f.view(src) == nil {
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		select {
		case f.sem <- struct{}{}:
		default:
			continue // overloaded: the client retries
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer func() { <-f.sem }()
			if ans := f.answer(src, q, false); ans != nil {
				_, _ = f.udp.WriteToUDPAddrPort(ans, from)
			}
		}()
	}
}

func (f *forwarder) serveTCP() {
	defer f.wg.Done()
	for {
		c, err := f.tcp.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		if f.view(src) == nil {
			c.Close()
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer c.Close()
			for {
				_ = c.SetDeadline(time.Now().Add(tcpIdle))
				q, err := dnstcp.Read(c)
				if err != nil {
					return
				}
				ans := f.answer(src, q, true)
				if ans == nil || dnstcp.Write(c, ans) != nil {
					return
				}
			}
		}()
	}
}

// answer handles one query from the sandbox at src; nil: no answer.
func (f *forwarder) answer(src netip.Addr, q []byte, tcp bool) []byte {
	v := f.view(src)
	if v == nil {
		return nil
	}
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(h, qs, dnsmessage.RCodeFormatError)
	}
	name := strings.TrimSuffix(strings.ToLower(qs[0].Name.String()), ".")
	allowed := domainMatch(v.allow, name)
	if !allowed && domainMatch(v.deny, name) {
		return reply(h, qs, dnsmessage.RCodeNameError)
	}
	if qs[0].Type == dnsmessage.TypeAAAA {
		// A sandbox link carries IPv4 only: no IPv6 address is ever
		// reachable, so none is handed out (clients go straight to IPv4).
		return reply(h, qs, dnsmessage.RCodeSuccess)
	}
	ans, err := f.exchange(q, tcp)
	if err != nil {
		f.log.Debug("dns forward", "sandbox", v.id, "name", name, "err", err)
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	if allowed {
		if err := f.learn(v, name, ans); err != nil {
			f.log.Warn("dns: learn addresses", "sandbox", v.id, "name", name, "err", err)
			return reply(h, qs, dnsmessage.RCodeServerFailure)
		}
	}
	return ans
}

// reply builds an answer with no records and rcode.
func reply(h dnsmessage.Header, qs []dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	for _, q := range qs {
		if err := b.Question(q); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// exchange asks the node's resolver, over the client's transport.
func (f *forwarder) exchange(q []byte, tcp bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), upstreamWait)
	defer cancel()
	network := "udp"
	if tcp {
		network = "tcp"
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, f.upstream.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if tcp {
		if err := dnstcp.Write(c, q); err != nil {
			return nil, err
		}
		return dnstcp.Read(c)
	}
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if n >= 2 && buf[0] == q[0] && buf[1] == q[1] {
			return buf[:n], nil
		}
	}
}

// learn adds the public IPv4 addresses of ans's A records (the answer for
// name) to v's set.
func (f *forwarder) learn(v *dnsView, name string, ans []byte) error {
	var p dnsmessage.Parser
	if _, err := p.Start(ans); err != nil {
		return err
	}
	if err := p.SkipAllQuestions(); err != nil {
		return err
	}
	ttl := map[netip.Addr]time.Duration{}
	var addrs []netip.Addr
	for {
		h, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return err
		}
		if h.Type != dnsmessage.TypeA || h.Class != dnsmessage.ClassINET {
			if err := p.SkipAnswer(); err != nil {
				return err
			}
			continue
		}
		r, err := p.AResource()
		if err != nil {
			return err
		}
		a := netip.AddrFrom4(r.A)
		if !f.m.learnable(a) {
			continue
		}
		d := min(max(time.Duration(h.TTL)*time.Second, minLearn), maxLearn)
		if _, dup := ttl[a]; !dup {
			addrs = append(addrs, a)
		}
		ttl[a] = max(ttl[a], d)
	}
	if len(addrs) == 0 {
		return nil
	}
	now := time.Now()
	f.mu.Lock()
	known := map[netip.Addr]bool{}
	for _, a := range addrs {
		if exp, ok := v.learned[a]; ok && exp.After(now) {
			known[a] = true
		}
	}
	f.mu.Unlock()
	err := f.m.commit(func(c *nftables.Conn) error { return f.m.rs.learn(c, v.link, addrs, known, ttl) }, 0)
	if err != nil && len(known) > 0 {
		// What we thought was in the set had gone: add only.
		err = f.m.commit(func(c *nftables.Conn) error { return f.m.rs.learn(c, v.link, addrs, nil, ttl) }, 0)
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	for _, a := range addrs {
		exp := now.Add(ttl[a])
		v.learned[a] = exp
		ns := v.names[a]
		if ns == nil {
			ns = map[string]time.Time{}
			v.names[a] = ns
		}
		for n, e := range ns {
			if !e.After(now) {
				delete(ns, n)
			}
		}
		ns[name] = exp
	}
	f.mu.Unlock()
	return nil
}

// startDNS starts the forwarder unless Config.DNS is "off".
func (m *Manager) startDNS() error {
	var up netip.AddrPort
	switch d := m.cfg.DNS; d {
	case "off":
		return nil
	case "":
		a, err := systemResolver()
		if err != nil {
			m.log.Warn("no DNS forwarder for sandboxes (domain rules refused)", "err", err)
			return nil
		}
		up = a
	default:
		if ap, err := netip.ParseAddrPort(d); err == nil {
			up = ap
		} else if a, err := netip.ParseAddr(d); err == nil {
			up = netip.AddrPortFrom(a, 53)
		} else {
			return errdefs.Invalid("netpolicy: DNS resolver %q: want ADDR or ADDR:PORT", d)
		}
	}
	f, err := startForwarder(m, up)
	if err != nil {
		return errdefs.Internal(err, "netpolicy: DNS forwarder")
	}
	if !m.cfg.NoHostCheck {
		h, err := startHostProxy(f)
		if err != nil {
			f.close()
			return errdefs.Internal(err, "netpolicy: host check")
		}
		m.hck, m.rs.hostPort = h, h.port
	}
	m.fwd = f
	return nil
}

func (m *Manager) stopDNS() {
	if m.hck != nil {
		m.hck.close()
	}
	if m.fwd != nil {
		m.fwd.close()
	}
}

// dnsPort is the forwarder's port (0: none).
func (m *Manager) dnsPort() uint16 {
	if m.fwd == nil {
		return 0
	}
	return m.fwd.port
}

// showDNS tells the forwarder about r's sandbox; keep: its learned
// addresses are still in its set.
func (m *Manager) showDNS(r *record, keep bool) {
	if m.fwd == nil {
		return
	}
	es, err := r.entries()
	if err != nil {
		m.log.Warn("dns: entries of the record", "sandbox", r.ID, "err", err)
	}
	m.fwd.set(r.Addr, &dnsView{id: r.ID, link: r.Link, allow: r.Policy.AllowDomains, deny: r.Policy.DenyDomains, entries: es}, keep)
}

// learnable says whether a resolved address may enter a learned set: a
// public address, not the pool, a reserved or a private range.
func (m *Manager) learnable(a netip.Addr) bool {
	if !a.Is4() || m.cfg.Pool.Contains(a) {
		return false
	}
	for _, p := range m.rs.never() {
		if p.Contains(a) {
			return false
		}
	}
	for _, p := range private {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
