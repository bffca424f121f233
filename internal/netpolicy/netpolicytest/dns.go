package netpolicytest

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/dsec-dev/dsec/internal/netpolicy/dnstcp"
)

// DNSServer runs a tiny authoritative resolver on UDP and TCP at addr inside
// ns (a test host's namespace): an A (IPv4) or AAAA (IPv6) query for a name
// in records is answered with its address and ttl, a query of the other
// type with no record, a name not in records with NXDOMAIN. It stops when t
// ends.
func DNSServer(t testing.TB, ns *os.File, addr string, ttl uint32, records map[string]netip.Addr) {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	if err := In(ns, func() error {
		var err error
		if pc, err = net.ListenPacket("udp4", addr); err != nil {
			return err
		}
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatalf("dns server %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if ans := dnsAnswer(buf[:n], ttl, records); ans != nil {
				_, _ = pc.WriteTo(ans, from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				q, err := dnstcp.Read(c)
				if err != nil {
					return
				}
				if ans := dnsAnswer(q, ttl, records); ans != nil {
					_ = dnstcp.Write(c, ans)
				}
			}()
		}
	}()
}

func dnsAnswer(q []byte, ttl uint32, records map[string]netip.Addr) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qn, err := p.Question()
	if err != nil {
		return nil
	}
	a, ok := records[strings.TrimSuffix(strings.ToLower(qn.Name.String()), ".")]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true}
	if !ok {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	_ = b.StartQuestions()
	_ = b.Question(qn)
	rh2 := dnsmessage.ResourceHeader{Name: qn.Name, Class: dnsmessage.ClassINET, TTL: ttl}
	switch {
	case ok && a.Is4() && qn.Type == dnsmessage.TypeA:
		_ = b.StartAnswers()
		_ = b.AResource(rh2, dnsmessage.AResource{A: a.As4()})
	case ok && a.Is6() && qn.Type == dnsmessage.TypeAAAA:
		_ = b.StartAnswers()
		_ = b.AAAAResource(rh2, dnsmessage.AAAAResource{AAAA: a.As16()})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// Lookup asks server (ADDR:PORT) for name's A records from inside ns, over
// UDP, or TCP with tcp; it returns the addresses and the answer's rcode.
func Lookup(ns *os.File, server, name string, tcp bool) ([]netip.Addr, dnsmessage.RCode, error) {
	return LookupType(ns, server, name, dnsmessage.TypeA, tcp)
}

// LookupType is Lookup for records of type qtype (A or AAAA).
func LookupType(ns *os.File, server, name string, qtype dnsmessage.Type, tcp bool) ([]netip.Addr, dnsmessage.RCode, error) {
	n, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, 0, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 4711, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: n, Type: qtype, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		return nil, 0, err
	}
	var ans []byte
	err = In(ns, func() error {
		network := "udp4"
		if tcp {
			network = "tcp4"
		}
		c, err := net.DialTimeout(network, server, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if tcp {
			if err := dnstcp.Write(c, q); err != nil {
				return err
			}
			ans, err = dnstcp.Read(c)
			return err
		}
		if _, err := c.Write(q); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		k, err := c.Read(buf)
		ans = buf[:k]
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(ans)
	if err != nil {
		return nil, 0, err
	}
	if h.ID != 4711 {
		return nil, 0, errors.New("answer with another id")
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, 0, err
	}
	var out []netip.Addr
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		switch rh.Type {
		case dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return nil, 0, err
			}
			out = append(out, netip.AddrFrom4(r.A))
		case dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return nil, 0, err
			}
			out = append(out, netip.AddrFrom16(r.AAAA))
		default:
			_ = p.SkipAnswer()
		}
	}
	return out, h.RCode, nil
}
