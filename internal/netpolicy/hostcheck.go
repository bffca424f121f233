package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The node's host check. An address learned for an allowed name admits, by
// address alone, any flow to it: another name served from the same address
// (a CDN, a shared host) would pass too. So the TCP flows a domain rule
// admits to ports 80 and 443 (hostCheckPorts) are redirected by the node's
// table (hostChain) to this transparent proxy, which reads the name the
// sandbox asks for — the server name (SNI) of a TLS ClientHello, else the
// Host header of an HTTP request — and lets the flow through only if the
// sandbox's rules allow that name and the address it connected to was
// learned for that very name. It then connects to that address (never one
// of its own choosing: the destination is pinned) from the node, replays
// what it read and copies both ways; TLS is not terminated, the sandbox sees
// the server's own certificate. A flow an address entry of the policy
// admits as well (e.g. 0.0.0.0/0 besides the domain rules) is carried
// without reading. Anything else (no name, a name not allowed,
// an address learned for another name, nothing readable within hostWait) is
// answered with a TCP reset. Plain HTTP is checked request by request
// (checkRequests); whatever is sent inside TLS is not read.

var hostCheckPorts = []uint16{80, 443}

const (
	hostWait = 10 * time.Second // for the ClientHello or the request head
	dialWait = 10 * time.Second
	maxHello = 64 << 10 // bytes read at most to find the name
)

var errNoName = errors.New("no server name")

// tlsHandshake is the first byte of a TLS handshake record.
const tlsHandshake = 0x16

type hostProxy struct {
	f    *forwarder
	ln   *net.TCPListener
	port uint16
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[*net.TCPConn]struct{}
	done  bool
}

func startHostProxy(f *forwarder) (*hostProxy, error) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{})
	if err != nil {
		return nil, err
	}
	p := &hostProxy{f: f, ln: ln, port: uint16(ln.Addr().(*net.TCPAddr).Port), conns: map[*net.TCPConn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// close stops the proxy and cuts the flows it carries.
func (p *hostProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.done = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c (false: the proxy is closing).
func (p *hostProxy) track(c *net.TCPConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *hostProxy) untrack(c *net.TCPConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *hostProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(c)
		}()
	}
}

// handle checks one redirected flow and, if admitted, carries it.
func (p *hostProxy) handle(c *net.TCPConn) {
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	if p.f.view(src) == nil { // not redirected from a sandbox
		reset(c)
		return
	}
	dst, err := originalDst(c)
	if err != nil {
		p.refuse(c, src, "", netip.AddrPort{}, err)
		return
	}
	var name string
	var head []byte
	if !p.f.byAddress(src, dst) { // else the policy admits it whatever the name
		_ = c.SetReadDeadline(time.Now().Add(hostWait))
		name, head, err = readName(c)
		if err != nil {
			p.refuse(c, src, name, dst, err)
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if !p.f.admits(src, dst.Addr(), name) {
			p.refuse(c, src, name, dst, errors.New("name not allowed for this address"))
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialWait)
	var d net.Dialer
	uc, err := d.DialContext(ctx, "tcp4", dst.String())
	cancel()
	if err != nil { // the server's answer, not the policy's: not counted
		p.f.log.Debug("host check: connect", "name", name, "dst", dst, "err", err)
		reset(c)
		return
	}
	up := uc.(*net.TCPConn)
	if !p.track(up) {
		up.Close()
		return
	}
	defer p.untrack(up)
	if name != "" && head[0] != tlsHandshake {
		p.checkRequests(c, up, head, src, dst)
		return
	}
	if _, err := up.Write(head); err != nil {
		reset(c)
		return
	}
	splice(c, up)
}

// checkRequests carries a plain HTTP flow that a domain rule admitted
// request by request: every request on the kept-alive connection must name
// a host allowed for the address, as the first did (one naming another is
// refused: the flow is reset and counted), so a later request cannot ask a
// shared address (a CDN) for a name the rules deny. Answers are copied as
// they come. A WebSocket (any Upgrade) is carried only as the connection's
// first request; once the server answers 101 the flow is no longer HTTP and
// is copied as it is; any other answer keeps the requests checked.
func (p *hostProxy) checkRequests(c, up *net.TCPConn, head []byte, src netip.Addr, dst netip.AddrPort) {
	br := bufio.NewReader(io.MultiReader(bytes.NewReader(head), c))
	cut := func() { reset(c); reset(up) }
	req, err := http.ReadRequest(br)
	if err != nil {
		cut()
		return
	}
	switched := make(chan bool, 1) // the first answer's verdict, for an upgrade
	upgrade := req.Header.Get("Upgrade") != ""
	done := make(chan struct{})
	firstReq := req
	go func() {
		defer close(done)
		var err error
		if upgrade {
			err = copyFirstAnswer(c, up, firstReq, switched)
		} else {
			_, err = io.Copy(c, up)
		}
		if err != nil {
			cut()
			return
		}
		_ = c.CloseWrite()
	}()
	defer func() { <-done }()
	for first := true; ; first = false {
		if !first {
			if req, err = http.ReadRequest(br); err != nil {
				if errors.Is(err, io.EOF) {
					_ = up.CloseWrite()
				} else {
					cut()
				}
				return
			}
		}
		name := requestName(req)
		if !p.f.admits(src, dst.Addr(), name) {
			p.refuse(c, src, name, dst, errors.New("a later request on the connection names a host not allowed for this address"))
			reset(up)
			return
		}
		if !first && req.Header.Get("Upgrade") != "" {
			p.refuse(c, src, name, dst, errors.New("an upgrade after the connection's first request"))
			reset(up)
			return
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // Write adds Go's own otherwise
		}
		if err := req.Write(up); err != nil {
			cut()
			return
		}
		if first && upgrade {
			if ok := <-switched; ok { // the rest is the new protocol's
				if _, err := io.Copy(up, br); err != nil {
					cut()
					return
				}
				_ = up.CloseWrite()
				return
			}
		}
	}
}

// copyFirstAnswer copies the server's answer to an upgrade request, says on
// switched whether it is 101 Switching Protocols, then copies the rest.
func copyFirstAnswer(c, up *net.TCPConn, req *http.Request, switched chan<- bool) error {
	var raw bytes.Buffer
	ur := bufio.NewReader(io.TeeReader(up, &raw))
	res, err := http.ReadResponse(ur, req)
	if err != nil {
		switched <- false
		return err
	}
	switched <- res.StatusCode == http.StatusSwitchingProtocols
	if _, err := c.Write(raw.Bytes()); err != nil { // the head and what was read past it
		return err
	}
	_, err = io.Copy(c, up)
	return err
}

func (p *hostProxy) refuse(c *net.TCPConn, src netip.Addr, name string, dst netip.AddrPort, why error) {
	id := ""
	if v := p.f.view(src); v != nil {
		id = v.id
		v.refused.Add(1)
	}
	p.f.log.Debug("egress refused by the host check", "sandbox", id, "name", name, "dst", dst, "why", why)
	reset(c)
}

// reset closes c with a TCP reset.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// splice copies both ways until both directions end; an error on one side
// cuts the other.
func splice(a, b *net.TCPConn) {
	done := make(chan struct{})
	cp := func(dst, src *net.TCPConn) {
		if _, err := io.Copy(dst, src); err != nil {
			reset(dst)
			reset(src)
			return
		}
		_ = dst.CloseWrite()
	}
	go func() { cp(b, a); close(done) }()
	cp(a, b)
	<-done
}

// originalDst is where the sandbox sent the flow before the redirect.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var mreq *unix.IPv6Mreq
	var serr error
	if err := raw.Control(func(fd uintptr) {
		mreq, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", serr)
	}
	// A struct sockaddr_in: family, port (big-endian), address.
	b := mreq.Multiaddr
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3])), nil
}

// readName reads from c until it knows the name the flow asks for: the SNI
// of a TLS ClientHello, else an HTTP request's Host (without port). It
// returns the name, canonical, and every byte it read.
func readName(c net.Conn) (string, []byte, error) {
	var head bytes.Buffer
	r := io.TeeReader(io.LimitReader(c, maxHello), &head)
	var first [1]byte
	if _, err := io.ReadFull(r, first[:]); err != nil {
		return "", nil, err
	}
	rest := io.MultiReader(bytes.NewReader(first[:]), r)
	var name string
	var err error
	if first[0] == tlsHandshake {
		name, err = helloName(c, rest)
	} else {
		name, err = requestHost(rest)
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if err == nil && name == "" {
		err = errNoName
	}
	return name, head.Bytes(), err
}

var errHelloRead = errors.New("client hello read")

// helloName parses a ClientHello from r with crypto/tls, stopping as soon
// as the hello is read (nothing is answered to the client).
func helloName(c net.Conn, r io.Reader) (string, error) {
	var name string
	var seen bool
	srv := tls.Server(readOnly{Conn: c, r: r}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, seen = h.ServerName, true
			return nil, errHelloRead
		},
	})
	err := srv.Handshake()
	if seen {
		return name, nil
	}
	return "", fmt.Errorf("tls client hello: %w", err)
}

// requestHost reads an HTTP request head from r and returns its host.
func requestHost(r io.Reader) (string, error) {
	req, err := http.ReadRequest(bufio.NewReader(r))
	if err != nil {
		return "", fmt.Errorf("http request: %w", err)
	}
	return requestName(req), nil
}

// requestName is req's host as readName gives it: without port, canonical.
func requestName(req *http.Request) string {
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// readOnly is a connection for parsing: reads come from r, writes vanish.
type readOnly struct {
	net.Conn
	r io.Reader
}

func (c readOnly) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c readOnly) Write(b []byte) (int, error) { return len(b), nil }
func (c readOnly) Close() error                { return nil }
